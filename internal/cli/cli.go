// Package cli holds what the binaries share for their command lines: flags
// that default from environment variables, the slog logger and --version. Of
// this module it imports only internal/version. --probe URL is the health
// check of an image without a shell (Probe).
package cli

import (
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"time"
)

// Flags wraps a FlagSet whose flags default from environment variables.
type Flags struct {
	*flag.FlagSet
	getenv func(string) string
	errs   []error
}

// NewFlags returns a FlagSet named name that writes usage to stderr.
func NewFlags(name string, getenv func(string) string, stderr io.Writer) *Flags {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	return &Flags{FlagSet: fs, getenv: getenv}
}

func (f *Flags) envUsage(env, usage string) string {
	if env == "" {
		return usage
	}
	return usage + " (env " + env + ")"
}

// String defines a string flag defaulting from env, then def.
func (f *Flags) String(name, env, def, usage string) *string {
	if v := f.lookup(env); v != "" {
		def = v
	}
	return f.FlagSet.String(name, def, f.envUsage(env, usage))
}

// Duration defines a duration flag defaulting from env, then def.
func (f *Flags) Duration(name, env string, def time.Duration, usage string) *time.Duration {
	if v := f.lookup(env); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			f.errs = append(f.errs, fmt.Errorf("%s: %q is not a duration (e.g. 30s, 5m)", env, v))
		} else {
			def = d
		}
	}
	return f.FlagSet.Duration(name, def, f.envUsage(env, usage))
}

// Int defines an int flag defaulting from env, then def.
func (f *Flags) Int(name, env string, def int, usage string) *int {
	if v := f.lookup(env); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			f.errs = append(f.errs, fmt.Errorf("%s: %q is not an integer", env, v))
		} else {
			def = n
		}
	}
	return f.FlagSet.Int(name, def, f.envUsage(env, usage))
}

func (f *Flags) lookup(env string) string {
	if env == "" || f.getenv == nil {
		return ""
	}
	return f.getenv(env)
}

// Parse parses args, reporting bad environment values first.
func (f *Flags) Parse(args []string) error {
	if len(f.errs) > 0 {
		return f.errs[0]
	}
	return f.FlagSet.Parse(args)
}

// NewLogger returns a slog logger writing to w; format is "json" or "text",
// level one of debug, info, warn, error.
func NewLogger(w io.Writer, level, format string) (*slog.Logger, error) {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("log level %q: want debug, info, warn or error", level)
	}
	opts := &slog.HandlerOptions{Level: lvl}
	switch strings.ToLower(format) {
	case "json", "":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	default:
		return nil, fmt.Errorf("log format %q: want json or text", format)
	}
}
