package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

// RunFunc is a binary's testable entry point: it runs until ctx ends.
type RunFunc func(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error

// Main runs run with the process's arguments, environment and standard
// streams, and a context cancelled by SIGINT or SIGTERM. It exits 0 on
// success or -h; otherwise it prints "name: error" and exits with
// exitCode(err) (nil: 1).
func Main(name string, run RunFunc, exitCode func(error) int) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	if err == nil || errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
	code := 1
	if exitCode != nil {
		code = exitCode(err)
	}
	os.Exit(code)
}
