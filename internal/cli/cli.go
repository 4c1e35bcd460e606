// Package cli holds what the binaries share for their command lines: flags
// that default from environment variables, the slog logger and --version. Of
// this module it imports only internal/version and internal/durations. --probe
// URL is the health check of an image without a shell (Probe).
package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/inboxhq/inbox/internal/durations"
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
	f := &Flags{FlagSet: fs, getenv: getenv}
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage of %s:\n", name)
		f.PrintDefaults()
	}
	return f
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

// Duration defines a duration flag defaulting from env, then def. It reads
// days as well as Go's units (7d, 1d12h) and shows its default the same way
// (30d, not 720h0m0s).
func (f *Flags) Duration(name, env string, def time.Duration, usage string) *time.Duration {
	if v := f.lookup(env); v != "" {
		d, err := durations.Parse(v)
		if err != nil {
			f.errs = append(f.errs, fmt.Errorf("%s: %w", env, err))
		} else {
			def = d
		}
	}
	v := durations.Value(def)
	f.FlagSet.Var(&v, name, f.envUsage(env, usage))
	return (*time.Duration)(&v)
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

// Float defines a float64 flag defaulting from env, then def.
func (f *Flags) Float(name, env string, def float64, usage string) *float64 {
	if v := f.lookup(env); v != "" {
		x, err := strconv.ParseFloat(v, 64)
		if err != nil {
			f.errs = append(f.errs, fmt.Errorf("%s: %q is not a number", env, v))
		} else {
			def = x
		}
	}
	return f.FlagSet.Float64(name, def, f.envUsage(env, usage))
}

func (f *Flags) lookup(env string) string {
	if env == "" || f.getenv == nil {
		return ""
	}
	return f.getenv(env)
}

// Parse parses args, reporting bad environment values first. A bad flag is
// a UsageError of one line that points at -h (the flag package's own
// message and usage dump are not printed: the caller prints the error
// once); -h prints the flags and returns flag.ErrHelp.
func (f *Flags) Parse(args []string) error {
	if len(f.errs) > 0 {
		return UsageError{f.errs[0]}
	}
	out := f.Output()
	f.SetOutput(io.Discard)
	err := f.FlagSet.Parse(args)
	f.SetOutput(out)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, flag.ErrHelp):
		f.Usage()
		return err
	default:
		return UsageError{fmt.Errorf("%w (see '%s -h')", err, f.Name())}
	}
}

// PrintDefaults prints the flags as flag.FlagSet.PrintDefaults does, with
// "duration" (not "value") as the type of a Duration flag.
func (f *Flags) PrintDefaults() {
	f.VisitAll(func(fl *flag.Flag) {
		var b strings.Builder
		fmt.Fprintf(&b, "  -%s", fl.Name)
		name, usage := flag.UnquoteUsage(fl)
		if _, ok := fl.Value.(*durations.Value); ok && name == "value" {
			name = "duration"
		}
		if name != "" {
			b.WriteString(" " + name)
		}
		if b.Len() <= 4 { // a one-letter bool flag: usage on the same line
			b.WriteString("\t")
		} else {
			b.WriteString("\n    \t")
		}
		b.WriteString(strings.ReplaceAll(usage, "\n", "\n    \t"))
		switch fl.DefValue {
		case "", "0", "false", "0s":
		default:
			if name == "string" {
				fmt.Fprintf(&b, " (default %q)", fl.DefValue)
			} else {
				fmt.Fprintf(&b, " (default %v)", fl.DefValue)
			}
		}
		fmt.Fprintln(f.Output(), b.String())
	})
}

// UsageError marks a bad command line: Main exits 2 for it.
type UsageError struct{ Err error }

func (e UsageError) Error() string { return e.Err.Error() }
func (e UsageError) Unwrap() error { return e.Err }

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

// Count is n and the noun in its number: "1 envelope", "2 envelopes",
// "0 batches" (many is the plural, spelled out: "batches", "deliveries").
func Count[N ~int | ~int64](n N, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}
