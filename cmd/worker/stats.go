package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inboxhq/inbox/internal/admin"
	"github.com/inboxhq/inbox/internal/cli"
)

const statsUsage = `usage: worker stats [flags]

The inbox at a glance, from one snapshot: envelopes by source and status,
duplicate and conflicting deliveries per source, envelopes received in the
last hour and day, the oldest pending envelope, the top failure reasons, and
replays in the last 24 hours. Changes nothing.

flags:
`

func runStats(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	return adminCommand[struct{}, *admin.Stats]{
		name:  "stats",
		usage: statsUsage,
		flags: func(*cli.Flags) func([]string) (struct{}, error) {
			return func([]string) (struct{}, error) { return struct{}{}, nil }
		},
		exec: func(ctx context.Context, pool *pgxpool.Pool, _ struct{}) (*admin.Stats, error) {
			return admin.GetStats(ctx, pool)
		},
		text: func(w io.Writer, _ struct{}, st *admin.Stats) error { return writeStats(w, st) },
	}.run(ctx, args, getenv, stdout, stderr)
}

func writeStats(w io.Writer, st *admin.Stats) error {
	tw := newTable(w)
	fmt.Fprintln(tw, "SOURCE\tPENDING\tDONE\tFAILED\tIGNORED\tRESOLVED\tTOTAL\tDUPLICATES\tCONFLICTS\tRECEIVED 1H\tRECEIVED 24H")
	for _, s := range append(st.Sources, st.Totals) {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\n", s.Source, s.Pending, s.Done, s.Failed, s.Ignored, s.Resolved, s.Total,
			s.Duplicates, s.Conflicts, s.ReceivedLastHour, s.ReceivedLast24h)
	}
	if err := tw.Flush(); err != nil {
		return err
	}

	fmt.Fprintln(w)
	kv := newKeyValues(w)
	if o := st.OldestPending; o != nil {
		age := time.Duration(o.AgeSeconds * float64(time.Second)).Round(time.Second)
		kv.add("oldest pending:", "%s (envelope %d, %s, received %s)", age, o.EnvelopeID, o.Source, fmtTime(o.ReceivedAt))
	} else {
		kv.add("oldest pending:", "none")
	}
	kv.add("received, last hour:", "%s", arrivalRate(st))
	r := st.Replays
	kv.add("replays, last 24h:", "%d (envelopes: %d, runs: %d)", r.Replays, r.Envelopes, r.Runs)
	if err := kv.flush(); err != nil {
		return err
	}

	if len(st.Failures) == 0 {
		fmt.Fprintln(w, "\nfailures: none")
		return nil
	}
	fmt.Fprintf(w, "\nfailures by cause (top %d):\n", admin.TopFailures)
	tw = newTable(w)
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

// arrivalRate says how many envelopes arrived in the last hour, as a count
// and a mean rate, and since when arrivals are counted when that is within
// the last 24 hours.
func arrivalRate(st *admin.Stats) string {
	n := st.Totals.ReceivedLastHour
	out := fmt.Sprintf("%d (%.1f/s)", n, float64(n)/3600)
	if since := st.ArrivalsSince; since != nil {
		out += fmt.Sprintf("; counted since %s", fmtTime(*since))
	}
	return out
}
