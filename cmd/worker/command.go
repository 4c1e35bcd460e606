package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os/user"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inboxhq/inbox/internal/cli"
	"github.com/inboxhq/inbox/internal/pg"
)

// adminCommand is the one shape of every admin subcommand (envelopes list
// and show, replay, stats, purge, migrate, backfill), run in one order by
// run: parse the flags (a bad one is a usage error, exit status 2); turn
// them into the library's request, checked by the library's own validation
// (a failure is a usage error too, before any connection); open one pool;
// call the library; print its result as JSON (--json) or as text.
type adminCommand[Req, Res any] struct {
	// name is the command as typed ("envelopes list"); the flag set is
	// "worker "+name, and usage errors start with it.
	name string
	// usage is what -h prints before the flags.
	usage string
	// positional: the command takes arguments besides its flags (ids, a
	// subcommand word), anywhere among them. Without it any is a usage
	// error.
	positional bool
	// jsonHelp is the --json flag's help; empty: "print one JSON document".
	jsonHelp string
	// pool holds the pool's options; zero fields are the admin defaults (4
	// connections, application name inbox-admin).
	pool pg.Options
	// flags defines the command's flags on fs and returns the function that
	// turns their values and the positional arguments into the request,
	// checked with the library's validation: its error is a usage error.
	flags func(fs *cli.Flags) func(args []string) (Req, error)
	// exec calls the library. Its error is returned as it is (exit status
	// 1 unless it is a cli.UsageError), after res is printed if partial says so.
	exec func(ctx context.Context, pool *pgxpool.Pool, req Req) (Res, error)
	// partial reports whether res, returned with an error, is still printed
	// (a run cut short reports what it committed). nil: never.
	partial func(res Res) bool
	// json returns what --json prints, when that is not res; nil prints
	// nothing.
	json func(req Req, res Res) any
	// text prints res without --json.
	text func(w io.Writer, req Req, res Res) error
}

func (c adminCommand[Req, Res]) run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := newFlags("worker "+c.name, c.usage, getenv, stderr)
	request := c.flags(fs)
	asJSON := fs.Bool("json", false, cmp.Or(c.jsonHelp, "print one JSON document"))
	var pos []string
	var err error
	if c.positional {
		pos, err = parseInterspersed(fs, args)
	} else {
		err = fs.Parse(args)
		pos = fs.Args()
	}
	if err != nil {
		return cli.UsageError{Err: err}
	}
	if !c.positional && len(pos) > 0 {
		return cli.UsageError{Err: fmt.Errorf("%s: unexpected argument %q", c.name, pos[0])}
	}
	req, err := request(pos)
	var input inputError
	switch {
	case errors.As(err, &input):
		return input.err
	case err != nil:
		return cli.UsageError{Err: fmt.Errorf("%s: %w", c.name, err)}
	}
	opts := c.pool
	opts.MaxConns = cmp.Or(opts.MaxConns, 4)
	opts.ApplicationName = cmp.Or(opts.ApplicationName, "inbox-admin")
	pool, err := pg.Open(ctx, getenv("DATABASE_URL"), opts)
	if err != nil {
		return err
	}
	defer pool.Close()
	res, err := c.exec(ctx, pool, req)
	if err != nil && (c.partial == nil || !c.partial(res)) {
		return err
	}
	if perr := c.print(stdout, req, res, *asJSON); perr != nil && err == nil {
		err = perr
	}
	return err
}

// inputError is a request's error that is not the command line's: a file
// it names does not load (exit status 1, like a failure to connect).
type inputError struct{ err error }

func (e inputError) Error() string { return e.err.Error() }
func (e inputError) Unwrap() error { return e.err }

func (c adminCommand[Req, Res]) print(w io.Writer, req Req, res Res, asJSON bool) error {
	if !asJSON {
		return c.text(w, req, res)
	}
	var v any = res
	if c.json != nil {
		if v = c.json(req, res); v == nil {
			return nil
		}
	}
	return writeJSON(w, v)
}

// newFlags returns a FlagSet whose -h prints header, then the flags.
func newFlags(name, header string, getenv func(string) string, stderr io.Writer) *cli.Flags {
	fs := cli.NewFlags(name, getenv, stderr)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), header)
		fs.PrintDefaults()
	}
	return fs
}

// parseInterspersed parses flags that may come after positional arguments
// ("replay 12 13 --reason x") and returns the positional ones.
func parseInterspersed(fs *cli.Flags, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		// Parse stops at the first non-flag, or consumes a "--" terminator.
		if len(args) > len(rest) && args[len(args)-len(rest)-1] == "--" {
			return append(pos, rest...), nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

// currentActor is the OS user running the command.
func currentActor(getenv func(string) string) string {
	if u, err := user.Current(); err == nil && u.Username != "" {
		return u.Username
	}
	return getenv("USER")
}

func adminLogger(stderr io.Writer) *slog.Logger {
	return slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func newTable(w io.Writer) *tabwriter.Writer {
	return tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
}

// keyValues prints a result's fields as aligned "key  value" lines: the
// text form of show, replay, stats, purge and backfill. A value's format
// may hold more tab-separated columns.
type keyValues struct{ tw *tabwriter.Writer }

func newKeyValues(w io.Writer) keyValues { return keyValues{newTable(w)} }

// add prints one line: key, then the value format and args make.
func (kv keyValues) add(key, format string, args ...any) {
	fmt.Fprintf(kv.tw, "%s\t%s\n", key, fmt.Sprintf(format, args...))
}

// line prints a line of its own (a note), aligned with nothing.
func (kv keyValues) line(s string) { fmt.Fprintln(kv.tw, s) }

func (kv keyValues) flush() error { return kv.tw.Flush() }

func fmtTime(t time.Time) string { return t.UTC().Format(time.RFC3339) }

func fmtTimePtr(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return fmtTime(*t)
}

func fmtIDPtr(id *int64) string {
	if id == nil {
		return "-"
	}
	return strconv.FormatInt(*id, 10)
}

func deref(s *string) string {
	if s == nil || *s == "" {
		return "-"
	}
	return *s
}

// oneLine flattens s to one line of at most n runes, for table cells.
func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}
