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

	"github.com/inboxhq/inbox/internal/version"
)

// RunFunc is a binary's testable entry point: it runs until ctx ends.
type RunFunc func(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error

// Main runs run with the process's arguments, environment and standard
// streams, and a context cancelled by SIGINT or SIGTERM. It exits 0 on
// success or -h; otherwise it prints "name: error" and exits with
// exitCode(err) (nil: 1). A first argument --version (or -version) prints
// the build's version, revision and Go version to stdout and exits 0,
// without reading the environment. A command line of --probe URL alone
// runs Probe (the container health check) and exits with its status.
func Main(name string, run RunFunc, exitCode func(error) int) {
	if len(os.Args) > 1 && isVersionFlag(os.Args[1]) {
		fmt.Fprintln(os.Stdout, version.Get().String(name))
		os.Exit(0)
	}
	if url, ok := probeURL(os.Args[1:]); ok {
		os.Exit(Probe(context.Background(), url, os.Stderr))
	}
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
	if errors.As(err, new(UsageError)) {
		code = 2
	}
	os.Exit(code)
}

// isVersionFlag reports whether arg asks for the version (--version,
// -version, --version=true).
func isVersionFlag(arg string) bool {
	switch arg {
	case "--version", "-version", "--version=true", "-version=true":
		return true
	}
	return false
}
