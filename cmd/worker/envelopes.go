package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os/user"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inboxhq/inbox/internal/admin"
	"github.com/inboxhq/inbox/internal/cli"
	"github.com/inboxhq/inbox/internal/pg"
)

const envelopesUsage = `usage: worker envelopes list [flags]
       worker envelopes show [flags] ID

Read envelopes; changes nothing.

  list    envelopes the filter flags select, newest first, a page at a time
  show    one envelope: headers, body, attempts, replays, conflicts, jobs and
          its ledger transaction

Run 'worker envelopes list -h' or 'worker envelopes show -h' for flags.
`

func runEnvelopes(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, envelopesUsage)
		return usageError{errors.New("envelopes: want a subcommand: list or show")}
	}
	switch args[0] {
	case "list":
		return runEnvelopesList(ctx, args[1:], getenv, stdout, stderr)
	case "show":
		return runEnvelopesShow(ctx, args[1:], getenv, stdout, stderr)
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stderr, envelopesUsage)
		return usageError{flag.ErrHelp}
	default:
		fmt.Fprint(stderr, envelopesUsage)
		return usageError{fmt.Errorf("envelopes: unknown subcommand %q (want list or show)", args[0])}
	}
}

const listUsage = `usage: worker envelopes list [flags]

List envelopes, newest first. The last line names the --before-id of the next
page. Changes nothing.

  worker envelopes list --status failed --cause forward_5xx
  worker envelopes list --field data.merchant_id=m_1 --field data.amount:=100
  worker envelopes list --contains '{"data":{"object":{"customer":"cus_1"}}}'
  worker envelopes list --header 'X-GitHub-Event=push' --since 1h

flags:
`

func runEnvelopesList(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := newFlags("worker envelopes list", listUsage, getenv, stderr)
	ff := addFilterFlags(fs)
	limit := fs.Int("limit", "", admin.DefaultListLimit, fmt.Sprintf("envelopes per page (at most %d)", admin.MaxListLimit))
	beforeID := fs.Int("before-id", "", 0, "only envelopes with an id below this (the cursor of the previous page)")
	asJSON := fs.Bool("json", false, "print one JSON document")
	if err := fs.Parse(args); err != nil {
		return usageError{err}
	}
	if fs.NArg() > 0 {
		return usageError{fmt.Errorf("envelopes list: unexpected argument %q (select with flags)", fs.Arg(0))}
	}
	f, err := ff.filter(nil)
	if err != nil {
		return usageError{err}
	}
	if *limit < 1 || *limit > admin.MaxListLimit {
		return usageError{fmt.Errorf("--limit %d: want 1 to %d", *limit, admin.MaxListLimit)}
	}
	if *beforeID < 0 {
		return usageError{fmt.Errorf("--before-id %d: must be positive", *beforeID)}
	}
	pool, err := openPool(ctx, getenv)
	if err != nil {
		return err
	}
	defer pool.Close()
	page, err := admin.List(ctx, pool, admin.ListRequest{Filter: f, Limit: *limit, BeforeID: int64(*beforeID)})
	if err != nil {
		return err
	}
	if *asJSON {
		return writeJSON(stdout, page)
	}
	if len(page.Envelopes) == 0 {
		fmt.Fprintln(stdout, "no envelopes match")
		return nil
	}
	if err := writeSummaries(stdout, page.Envelopes); err != nil {
		return err
	}
	if page.NextBeforeID != nil {
		fmt.Fprintf(stdout, "\nmore: add --before-id %d\n", *page.NextBeforeID)
	}
	return nil
}

const showUsage = `usage: worker envelopes show [flags] ID

Show one envelope and everything recorded about it: headers (signature values
are stored as [redacted]), body (as text when UTF-8, else base64), attempts,
replays, conflicting deliveries, River jobs, and its ledger transaction with
its entries. Changes nothing.

flags:
`

func runEnvelopesShow(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := newFlags("worker envelopes show", showUsage, getenv, stderr)
	noBody := fs.Bool("no-body", false, "leave the body out")
	asJSON := fs.Bool("json", false, "print one JSON document")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return usageError{err}
	}
	if len(pos) != 1 {
		return usageError{errors.New("envelopes show: want exactly one envelope ID")}
	}
	ids, err := parseIDs(pos)
	if err != nil {
		return usageError{err}
	}
	pool, err := openPool(ctx, getenv)
	if err != nil {
		return err
	}
	defer pool.Close()
	d, err := admin.Show(ctx, pool, ids[0], admin.ShowOptions{NoBody: *noBody})
	if err != nil {
		return err
	}
	if *asJSON {
		return writeJSON(stdout, d)
	}
	return writeDetail(stdout, d, *noBody)
}

func writeDetail(w io.Writer, d *admin.Detail, noBody bool) error {
	e := d.Envelope
	tw := newTable(w)
	fmt.Fprintf(tw, "envelope\t%d\n", e.ID)
	fmt.Fprintf(tw, "source\t%s\n", e.Source)
	fmt.Fprintf(tw, "provider\t%s\n", e.Provider)
	fmt.Fprintf(tw, "delivery id\t%s\n", e.DeliveryID)
	fmt.Fprintf(tw, "event type\t%s\n", e.EventType)
	fmt.Fprintf(tw, "status\t%s\n", e.Status)
	if e.BackfillRunID != nil {
		fmt.Fprintf(tw, "origin\t%s (backfill_run %d: listed from the provider's log, no webhook of it had arrived)\n", e.Origin, *e.BackfillRunID)
	} else {
		fmt.Fprintf(tw, "origin\t%s\n", e.Origin)
	}
	if e.TraceContext != nil {
		fmt.Fprintf(tw, "trace\t%s\n", *e.TraceContext)
	}
	fmt.Fprintf(tw, "received at\t%s\n", fmtTime(e.ReceivedAt))
	fmt.Fprintf(tw, "signed at\t%s\n", fmtTimePtr(e.SignedAt))
	fmt.Fprintf(tw, "processed at\t%s\n", fmtTimePtr(e.ProcessedAt))
	fmt.Fprintf(tw, "attempts\t%d\n", e.Attempts)
	fmt.Fprintf(tw, "last error\t%s\n", deref(e.LastError))
	fmt.Fprintf(tw, "last cause\t%s\n", deref(e.LastCause))
	fmt.Fprintf(tw, "duplicates\t%d (last %s)\n", e.Duplicates, fmtTimePtr(e.LastDuplicateAt))
	fmt.Fprintf(tw, "body\t%d bytes, sha256 %s\n", e.BodySize, e.BodySHA256)
	if e.BodyPurgedAt != nil {
		fmt.Fprintf(tw, "body purged at\t%s\n", fmtTime(*e.BodyPurgedAt))
	}
	result := "-"
	if len(e.Result) > 0 {
		result = string(e.Result)
	}
	fmt.Fprintf(tw, "result\t%s\n", result)
	if err := tw.Flush(); err != nil {
		return err
	}

	section(w, "headers", len(e.Headers))
	keys := make([]string, 0, len(e.Headers))
	for k := range e.Headers {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	tw = newTable(w)
	for _, k := range keys {
		fmt.Fprintf(tw, "  %s\t%s\n", k, e.Headers[k])
	}
	if err := tw.Flush(); err != nil {
		return err
	}

	switch {
	case noBody:
	case e.Body == nil:
		fmt.Fprintln(w, "\nbody: not stored (purged)")
	default:
		fmt.Fprintf(w, "\nbody (%s):\n%s\n", e.BodyEncoding, *e.Body)
	}

	section(w, "attempts", len(d.Attempts))
	if len(d.Attempts) > 0 {
		tw = newTable(w)
		fmt.Fprintln(tw, "  ID\tJOB\tATTEMPT\tOUTCOME\tCAUSE\tSTARTED\tMS\tWORKER\tERROR")
		for _, a := range d.Attempts {
			fmt.Fprintf(tw, "  %d\t%s\t%d\t%s\t%s\t%s\t%.1f\t%s\t%s\n", a.ID, fmtIDPtr(a.JobID), a.Attempt, a.Outcome,
				deref(a.Cause), fmtTime(a.StartedAt), a.DurationMS, deref(a.Worker), oneLine(deref(a.Error), 80))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}

	section(w, "replays", len(d.Replays))
	if len(d.Replays) > 0 {
		tw = newTable(w)
		fmt.Fprintln(tw, "  ID\tAT\tACTOR\tPRIOR STATUS\tJOB\tBATCH\tREASON\tFILTER")
		for _, r := range d.Replays {
			fmt.Fprintf(tw, "  %d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.ID, fmtTime(r.ReplayedAt), r.Actor, r.PriorStatus,
				fmtIDPtr(r.JobID), deref(r.BatchID), oneLine(r.Reason, 60), string(r.Filter))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}

	section(w, "conflicts", len(d.Conflicts))
	if len(d.Conflicts) > 0 {
		tw = newTable(w)
		fmt.Fprintln(tw, "  ID\tRECEIVED\tBYTES\tSHA256")
		for _, c := range d.Conflicts {
			fmt.Fprintf(tw, "  %d\t%s\t%d\t%s\n", c.ID, fmtTime(c.ReceivedAt), c.BodySize, c.BodySHA256)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}

	section(w, "jobs", len(d.Jobs))
	if len(d.Jobs) > 0 {
		tw = newTable(w)
		fmt.Fprintln(tw, "  ID\tSTATE\tATTEMPT\tCREATED\tFINALIZED")
		for _, j := range d.Jobs {
			fmt.Fprintf(tw, "  %d\t%s\t%d/%d\t%s\t%s\n", j.ID, j.State, j.Attempt, j.MaxAttempts, fmtTime(j.CreatedAt), fmtTimePtr(j.FinalizedAt))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}

	if d.Ledger == nil {
		fmt.Fprintln(w, "\nledger transaction: none")
		return nil
	}
	l := d.Ledger
	fmt.Fprintf(w, "\nledger transaction %d: %s %d %s, merchant %s, key %s, posted %s\n",
		l.ID, l.Kind, l.AmountMinor, l.Currency, l.Merchant, l.IdempotencyKey, fmtTime(l.PostedAt))
	tw = newTable(w)
	fmt.Fprintln(tw, "  ENTRY\tACCOUNT\tMERCHANT\tCURRENCY\tAMOUNT (MINOR)")
	for _, en := range l.Entries {
		fmt.Fprintf(tw, "  %d\t%s\t%s\t%s\t%d\n", en.ID, en.Account, en.Merchant, en.Currency, en.AmountMinor)
	}
	return tw.Flush()
}

func section(w io.Writer, name string, n int) {
	if n == 0 {
		fmt.Fprintf(w, "\n%s: none\n", name)
		return
	}
	fmt.Fprintf(w, "\n%s (%d):\n", name, n)
}

// writeSummaries prints envelopes as an aligned table.
func writeSummaries(w io.Writer, envs []admin.Summary) error {
	tw := newTable(w)
	fmt.Fprintln(tw, "ID\tRECEIVED\tSOURCE\tEVENT TYPE\tSTATUS\tATTEMPTS\tDELIVERY ID\tCAUSE\tLAST ERROR / REASON")
	for _, e := range envs {
		typ, note := e.EventType, deref(e.LastError)
		if typ == "" {
			typ = "(none)" // stored whatever its body: the provider sent no event type
		}
		if e.Reason != nil {
			note = *e.Reason // ignored: stored but not routed, and why
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\n", e.ID, fmtTime(e.ReceivedAt), e.Source, typ,
			e.Status, e.Attempts, e.DeliveryID, deref(e.LastCause), oneLine(note, 60))
	}
	return tw.Flush()
}

// The helpers below are shared by the admin subcommands (envelopes, replay,
// stats).

// newFlags returns a FlagSet whose -h prints header, then the flags.
func newFlags(name, header string, getenv func(string) string, stderr io.Writer) *cli.Flags {
	fs := cli.NewFlags(name, getenv, stderr)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), header)
		fs.PrintDefaults()
	}
	return fs
}

// filterFlags are the selection flags replay and envelopes list share.
type filterFlags struct {
	source, status, eventType, deliveryID, since, until, cause *string
	contains, fields, headers                                  repeated
}

// repeated is a flag that may be given more than once.
type repeated []string

func (r *repeated) String() string     { return strings.Join(*r, ", ") }
func (r *repeated) Set(v string) error { *r = append(*r, v); return nil }

func addFilterFlags(fs *cli.Flags) *filterFlags {
	ff := &filterFlags{
		source:     fs.String("source", "", "", "only this source"),
		status:     fs.String("status", "", "", "only this status: pending, done, failed or ignored"),
		eventType:  fs.String("event-type", "", "", "only this event type"),
		deliveryID: fs.String("delivery-id", "", "", "only this delivery id"),
		since:      fs.String("since", "", "", "received at or after: RFC 3339 time, or a duration meaning that long ago (24h, 90m, 7d)"),
		until:      fs.String("until", "", "", "received before: RFC 3339 time, or a duration meaning that long ago"),
		cause:      fs.String("cause", "", "", "only envelopes whose last failure had this cause (unknown_currency, forward_5xx, ...; see docs/audit.md)"),
	}
	fs.Var(&ff.contains, "contains", "only envelopes whose body contains this `JSON` object, e.g. "+`'{"data":{"merchant_id":"m_1"}}' (repeatable)`)
	fs.Var(&ff.fields, "field", "only envelopes whose body has this `path=value`: data.merchant_id=m_1 (a string), data.amount:=100 (JSON) (repeatable)")
	fs.Var(&ff.headers, "header", "only envelopes with this stored header: `Name=value`, such as X-GitHub-Event=push (name in any case; repeatable)")
	return ff
}

// filter returns the validated Filter of the flags and ids; a wrong flag's
// error names it (--since: ...), as the console names its parameter.
func (ff *filterFlags) filter(ids []int64) (admin.Filter, error) {
	f, err := admin.FilterInput{
		IDs:        ids,
		Source:     *ff.source,
		Status:     *ff.status,
		EventType:  *ff.eventType,
		DeliveryID: *ff.deliveryID,
		Cause:      *ff.cause,
		Since:      *ff.since,
		Until:      *ff.until,
		Contains:   ff.contains,
		Fields:     ff.fields,
		Headers:    ff.headers,
	}.Parse()
	if ie := (*admin.InputError)(nil); errors.As(err, &ie) {
		return f, fmt.Errorf("--%w", ie)
	}
	return f, err
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

func parseIDs(args []string) ([]int64, error) {
	ids := make([]int64, 0, len(args))
	for _, a := range args {
		id, err := strconv.ParseInt(a, 10, 64)
		if err != nil || id <= 0 {
			return nil, fmt.Errorf("%q is not an envelope id (a positive integer)", a)
		}
		ids = append(ids, id)
	}
	return ids, nil
}

func openPool(ctx context.Context, getenv func(string) string) (*pgxpool.Pool, error) {
	return pg.Open(ctx, getenv("DATABASE_URL"), pg.Options{MaxConns: 4, ApplicationName: "inbox-admin"})
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
