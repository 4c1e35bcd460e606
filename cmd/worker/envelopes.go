package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"sort"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inboxhq/inbox/internal/admin"
	"github.com/inboxhq/inbox/internal/cli"
)

const envelopesUsage = `usage: worker envelopes list [flags]
       worker envelopes show [flags] ID
       worker envelopes resolve|unresolve --reason TEXT [flags] [ID...]

  list       envelopes the filter flags select, newest first, a page at a time
  show       one envelope: headers, body, attempts, replays, resolutions,
             conflicts, jobs and its ledger transaction
  resolve    close failed envelopes no replay can fix, with a recorded reason
  unresolve  make resolved envelopes failed again, with a recorded reason

list and show change nothing. Run 'worker envelopes SUBCOMMAND -h' for flags.
`

func runEnvelopes(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, envelopesUsage)
		return cli.UsageError{Err: errors.New("envelopes: want a subcommand: list, show, resolve or unresolve")}
	}
	switch args[0] {
	case "list":
		return runEnvelopesList(ctx, args[1:], getenv, stdout, stderr)
	case "show":
		return runEnvelopesShow(ctx, args[1:], getenv, stdout, stderr)
	case "resolve":
		return runResolve(false)(ctx, args[1:], getenv, stdout, stderr)
	case "unresolve":
		return runResolve(true)(ctx, args[1:], getenv, stdout, stderr)
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stderr, envelopesUsage)
		return cli.UsageError{Err: flag.ErrHelp}
	default:
		fmt.Fprint(stderr, envelopesUsage)
		return cli.UsageError{Err: fmt.Errorf("envelopes: unknown subcommand %q (want list, show, resolve or unresolve)", args[0])}
	}
}

const listUsage = `usage: worker envelopes list [flags]

List envelopes, newest first. Without --since (and without --delivery-id) it
reads the last 24 hours: --since 7d, or an RFC 3339 time, looks further back.
A body or header search (--field, --contains, --header) reads each day of
the window through its index (the bodies', the headers'); a day without one,
or a value too common for it, is read newest first under --scan-budget, and
the search says how far back it got. A line under the list says what
was read (window, partitions, envelopes, time); the last line names the
--before-id of the next page. Changes nothing.

  worker envelopes list --status failed --cause forward_5xx
  worker envelopes list --field data.merchant_id=m_1 --field data.amount:=100
  worker envelopes list --contains '{"data":{"object":{"customer":"cus_1"}}}'
  worker envelopes list --header 'X-GitHub-Event=push' --since 1h

flags:
`

func runEnvelopesList(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	return adminCommand[admin.ListRequest, admin.ListResult]{
		name:  "envelopes list",
		usage: listUsage,
		flags: func(fs *cli.Flags) func([]string) (admin.ListRequest, error) {
			ff := addFilterFlags(fs)
			limit := fs.Int("limit", "", admin.DefaultListLimit, fmt.Sprintf("envelopes per page (at most %d)", admin.MaxListLimit))
			beforeID := fs.Int("before-id", "", 0, "only envelopes with an id below this (the cursor of the previous page)")
			budget := fs.Int("scan-budget", "", admin.DefaultScanBudget, "a body or header search reads at most about this many envelopes, newest first")
			return func([]string) (admin.ListRequest, error) {
				f, err := ff.filter(nil)
				if err != nil {
					return admin.ListRequest{}, err
				}
				if *limit == 0 { // 0 is the library's default; typed, a mistake
					return admin.ListRequest{}, fmt.Errorf("--limit 0: want 1 to %d", admin.MaxListLimit)
				}
				if *budget <= 0 {
					return admin.ListRequest{}, fmt.Errorf("--scan-budget %d: want a positive number of envelopes", *budget)
				}
				req := admin.ListRequest{Filter: f, Limit: *limit, BeforeID: int64(*beforeID), ScanBudget: int64(*budget)}
				return req, req.Validate()
			}
		},
		exec: admin.List,
		text: func(w io.Writer, _ admin.ListRequest, page admin.ListResult) error {
			if len(page.Envelopes) == 0 {
				fmt.Fprintln(w, "no envelopes match")
			} else if err := writeSummaries(w, page.Envelopes); err != nil {
				return err
			}
			fmt.Fprintf(w, "\n%s\n", page.Scan)
			if page.NextBeforeID != nil {
				fmt.Fprintf(w, "\nmore: add --before-id %d\n", *page.NextBeforeID)
			}
			return nil
		},
	}.run(ctx, args, getenv, stdout, stderr)
}

const showUsage = `usage: worker envelopes show [flags] ID

Show one envelope and everything recorded about it: headers (signature values
are stored as [redacted]), body (as text when UTF-8, else base64), attempts,
replays, conflicting deliveries, River jobs, and its ledger transaction with
its entries. Changes nothing.

flags:
`

// showRequest is what envelopes show asks admin.Show.
type showRequest struct {
	id   int64
	opts admin.ShowOptions
}

func runEnvelopesShow(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	return adminCommand[showRequest, *admin.Detail]{
		name:       "envelopes show",
		usage:      showUsage,
		positional: true,
		flags: func(fs *cli.Flags) func([]string) (showRequest, error) {
			noBody := fs.Bool("no-body", false, "leave the body out")
			conflicts := fs.Bool("conflicts", false, fmt.Sprintf("diff each conflicting delivery's body against the stored one (the first %d)", maxConflictDiffs))
			return func(pos []string) (showRequest, error) {
				if len(pos) != 1 {
					return showRequest{}, errors.New("want exactly one envelope ID")
				}
				id, err := admin.ParseID(pos[0])
				if err != nil {
					return showRequest{}, err
				}
				opts := admin.ShowOptions{NoBody: *noBody}
				if *conflicts {
					opts.CompareConflicts = maxConflictDiffs
				}
				return showRequest{id: id, opts: opts}, nil
			}
		},
		exec: func(ctx context.Context, pool *pgxpool.Pool, req showRequest) (*admin.Detail, error) {
			return admin.Show(ctx, pool, req.id, req.opts)
		},
		text: func(w io.Writer, req showRequest, d *admin.Detail) error { return writeDetail(w, d, req.opts.NoBody) },
	}.run(ctx, args, getenv, stdout, stderr)
}

func writeDetail(w io.Writer, d *admin.Detail, noBody bool) error {
	e := d.Envelope
	kv := newKeyValues(w)
	kv.add("envelope", "%d", e.ID)
	kv.add("source", "%s", e.Source)
	kv.add("provider", "%s", e.Provider)
	kv.add("delivery id", "%s", e.DeliveryID)
	kv.add("event type", "%s", e.EventType)
	kv.add("status", "%s", e.Status)
	if e.BackfillRunID != nil {
		kv.add("origin", "%s (backfill_run %d: listed from the provider's log, no webhook of it had arrived)", e.Origin, *e.BackfillRunID)
	} else {
		kv.add("origin", "%s", e.Origin)
	}
	if e.TraceContext != nil {
		kv.add("trace", "%s", *e.TraceContext)
	}
	kv.add("received at", "%s", fmtTime(e.ReceivedAt))
	kv.add("signed at", "%s", fmtTimePtr(e.SignedAt))
	kv.add("processed at", "%s", fmtTimePtr(e.ProcessedAt))
	kv.add("attempts", "%d", e.Attempts)
	kv.add("last error", "%s", deref(e.LastError))
	kv.add("last cause", "%s", deref(e.LastCause))
	kv.add("duplicates", "%d (last %s)", e.Duplicates, fmtTimePtr(e.LastDuplicateAt))
	kv.add("body", "%d bytes, sha256 %s", e.BodySize, e.BodySHA256)
	if e.BodyPurgedAt != nil {
		kv.add("body purged at", "%s", fmtTime(*e.BodyPurgedAt))
	}
	result := "-"
	if len(e.Result) > 0 {
		result = string(e.Result)
	}
	kv.add("result", "%s", result)
	if err := kv.flush(); err != nil {
		return err
	}

	keys := make([]string, 0, len(e.Headers))
	for k := range e.Headers {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	if err := writeSection(w, "headers", len(keys), "", func(tw io.Writer, i int) {
		fmt.Fprintf(tw, "  %s\t%s\n", keys[i], e.Headers[keys[i]])
	}); err != nil {
		return err
	}

	switch {
	case noBody:
	case e.Body == nil:
		fmt.Fprintln(w, "\nbody: not stored (purged)")
	default:
		fmt.Fprintf(w, "\nbody (%s):\n%s\n", e.BodyEncoding, *e.Body)
	}

	for _, err := range []error{
		writeSection(w, "attempts", len(d.Attempts), "ID\tJOB\tATTEMPT\tOUTCOME\tCAUSE\tSTARTED\tMS\tWORKER\tERROR", func(tw io.Writer, i int) {
			a := d.Attempts[i]
			fmt.Fprintf(tw, "  %d\t%s\t%d\t%s\t%s\t%s\t%.1f\t%s\t%s\n", a.ID, fmtIDPtr(a.JobID), a.Attempt, a.Outcome,
				deref(a.Cause), fmtTime(a.StartedAt), a.DurationMS, deref(a.Worker), oneLine(deref(a.Error), 80))
		}),
		writeSection(w, "replays", len(d.Replays), "ID\tAT\tACTOR\tPRIOR STATUS\tJOB\tBATCH\tREASON\tFILTER", func(tw io.Writer, i int) {
			r := d.Replays[i]
			fmt.Fprintf(tw, "  %d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.ID, fmtTime(r.ReplayedAt), r.Actor, r.PriorStatus,
				fmtIDPtr(r.JobID), deref(r.BatchID), oneLine(r.Reason, 60), string(r.Filter))
		}),
		writeSection(w, "resolutions", len(d.Resolutions), "ID\tAT\tACTION\tACTOR\tBATCH\tREASON", func(tw io.Writer, i int) {
			r := d.Resolutions[i]
			fmt.Fprintf(tw, "  %d\t%s\t%s\t%s\t%s\t%s\n", r.ID, fmtTime(r.At), r.Action, r.Actor, r.BatchID, oneLine(r.Reason, 60))
		}),
		writeSection(w, "conflicts", len(d.Conflicts), "ID\tRECEIVED\tBYTES\tSHA256", func(tw io.Writer, i int) {
			c := d.Conflicts[i]
			fmt.Fprintf(tw, "  %d\t%s\t%d\t%s\n", c.ID, fmtTime(c.ReceivedAt), c.BodySize, c.BodySHA256)
		}),
		writeSection(w, "jobs", len(d.Jobs), "ID\tSTATE\tATTEMPT\tCREATED\tFINALIZED", func(tw io.Writer, i int) {
			j := d.Jobs[i]
			fmt.Fprintf(tw, "  %d\t%s\t%d/%d\t%s\t%s\n", j.ID, j.State, j.Attempt, j.MaxAttempts, fmtTime(j.CreatedAt), fmtTimePtr(j.FinalizedAt))
		}),
	} {
		if err != nil {
			return err
		}
	}

	writeConflictDiffs(w, d)
	if d.Ledger == nil {
		fmt.Fprintln(w, "\nledger transaction: none")
		return nil
	}
	l := d.Ledger
	fmt.Fprintf(w, "\nledger transaction %d: %s %d %s, merchant %s, key %s, posted %s\n",
		l.ID, l.Kind, l.AmountMinor, l.Currency, l.Merchant, l.IdempotencyKey, fmtTime(l.PostedAt))
	tw := newTable(w)
	fmt.Fprintln(tw, "  ENTRY\tACCOUNT\tMERCHANT\tCURRENCY\tAMOUNT (MINOR)")
	for _, en := range l.Entries {
		fmt.Fprintf(tw, "  %d\t%s\t%s\t%s\t%d\n", en.ID, en.Account, en.Merchant, en.Currency, en.AmountMinor)
	}
	return tw.Flush()
}

// maxConflictDiffs is how many conflicts show --conflicts compares.
const maxConflictDiffs = 20

// writeConflictDiffs prints each compared conflict's diff against the
// stored body ("-" stored only, "+" the conflicting delivery only), or why
// there is none.
func writeConflictDiffs(w io.Writer, d *admin.Detail) {
	for i, cd := range d.ConflictDiffs {
		c := d.Conflicts[i]
		fmt.Fprintf(w, "\nconflict %d (received %s, %d bytes, sha256 %s) against the stored body:\n", cd.ConflictID, fmtTime(c.ReceivedAt), c.BodySize, c.BodySHA256)
		if cd.Diff == nil {
			fmt.Fprintf(w, "  %s\n", cd.Note)
			continue
		}
		for _, l := range cd.Diff {
			fmt.Fprintf(w, "  %s %s\n", l.Op, l.Text)
		}
	}
	if n := len(d.Conflicts) - len(d.ConflictDiffs); n > 0 && len(d.ConflictDiffs) > 0 {
		fmt.Fprintf(w, "\n%s not compared (the first %d are): the SQL of docs/audit.md, \"Conflicting deliveries\", compares any\n",
			cli.Count(n, "conflict", "conflicts"), len(d.ConflictDiffs))
	}
}

// writeSection prints one section of a detail: "name: none", or
// "name (n):" and a table of n rows (row writes row i, indented), under
// header when there is one.
func writeSection(w io.Writer, name string, n int, header string, row func(tw io.Writer, i int)) error {
	if n == 0 {
		fmt.Fprintf(w, "\n%s: none\n", name)
		return nil
	}
	fmt.Fprintf(w, "\n%s (%d):\n", name, n)
	tw := newTable(w)
	if header != "" {
		fmt.Fprintln(tw, "  "+header)
	}
	for i := range n {
		row(tw, i)
	}
	return tw.Flush()
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
