package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/inboxhq/inbox/internal/admin"
)

const statsUsage = `usage: worker stats [flags]

The inbox at a glance, from one snapshot: envelopes by source and status,
duplicate and conflicting deliveries per source, the oldest pending envelope,
the top failure reasons, and replays in the last 24 hours. Changes nothing.

flags:
`

func runStats(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := newFlags("worker stats", statsUsage, getenv, stderr)
	asJSON := fs.Bool("json", false, "print one JSON document")
	if err := fs.Parse(args); err != nil {
		return usageError{err}
	}
	if fs.NArg() > 0 {
		return usageError{fmt.Errorf("stats: unexpected argument %q", fs.Arg(0))}
	}
	pool, err := openPool(ctx, getenv)
	if err != nil {
		return err
	}
	defer pool.Close()
	st, err := admin.GetStats(ctx, pool)
	if err != nil {
		return err
	}
	if *asJSON {
		return writeJSON(stdout, st)
	}

	tw := newTable(stdout)
	fmt.Fprintln(tw, "SOURCE\tPENDING\tDONE\tFAILED\tIGNORED\tTOTAL\tDUPLICATES\tCONFLICTS")
	for _, s := range append(st.Sources, st.Totals) {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\n", s.Source, s.Pending, s.Done, s.Failed, s.Ignored, s.Total, s.Duplicates, s.Conflicts)
	}
	if err := tw.Flush(); err != nil {
		return err
	}

	fmt.Fprintln(stdout)
	tw = newTable(stdout)
	if o := st.OldestPending; o != nil {
		age := time.Duration(o.AgeSeconds * float64(time.Second)).Round(time.Second)
		fmt.Fprintf(tw, "oldest pending:\t%s (envelope %d, %s, received %s)\n", age, o.EnvelopeID, o.Source, fmtTime(o.ReceivedAt))
	} else {
		fmt.Fprintln(tw, "oldest pending:\tnone")
	}
	r := st.Replays
	fmt.Fprintf(tw, "replays, last 24h:\t%d (envelopes: %d, runs: %d)\n", r.Replays, r.Envelopes, r.Runs)
	if err := tw.Flush(); err != nil {
		return err
	}

	if len(st.Failures) == 0 {
		fmt.Fprintln(stdout, "\nfailures: none")
		return nil
	}
	fmt.Fprintf(stdout, "\nfailures by cause (top %d):\n", admin.TopFailures)
	tw = newTable(stdout)
	fmt.Fprintln(tw, "COUNT\tCAUSE\tLATEST\tLATEST ERROR")
	for _, f := range st.Failures {
		cause := f.Cause
		if cause == "" {
			cause = "(none recorded)"
		}
		fmt.Fprintf(tw, "%d\t%s\t%d\t%s\n", f.Count, cause, f.LatestID, oneLine(f.LatestError, 100))
	}
	return tw.Flush()
}
