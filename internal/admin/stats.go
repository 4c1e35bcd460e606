package admin

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inboxhq/inbox/internal/envelope"
)

// TopFailures is how many failure causes Stats returns.
const TopFailures = 20

// Stats is the inbox at a glance, read in one snapshot.
type Stats struct {
	// GeneratedAt is the database's now() for the snapshot.
	GeneratedAt time.Time `json:"generated_at"`
	// Sources are sorted by name; Totals sums them.
	Sources []SourceStats `json:"sources"`
	Totals  SourceStats   `json:"totals"`
	// OldestPending is nil when nothing is pending.
	OldestPending *OldestPending `json:"oldest_pending"`
	// Failures groups failed envelopes by cause (envelope.last_cause), most
	// frequent first; at most TopFailures.
	Failures []FailureCause `json:"failures"`
	// Replays in the 24 hours before GeneratedAt.
	Replays ReplayStats `json:"replays_last_24h"`
	// ArrivalsSince is when arrivals started to be counted, when that was
	// less than 24 hours ago (each source's ReceivedLastHour and
	// ReceivedLast24h count only what came after); nil otherwise.
	ArrivalsSince *time.Time `json:"arrivals_counted_since,omitempty"`
}

// SourceStats counts one source's envelopes by status, and the duplicate
// (envelope_duplicate rows) and conflicting (envelope_conflict rows)
// deliveries it received.
type SourceStats = envelope.SourceCounts

// OldestPending is the pending envelope received first.
type OldestPending = envelope.Waiting

// FailureCause is one cause of failed envelopes, how many share it, and the
// newest of them as an example. Cause is "" for envelopes that failed
// before causes were recorded (migration 00171).
type FailureCause = envelope.FailureCause

// ReplayStats counts envelope_replay rows.
type ReplayStats = envelope.ReplayCounts

// GetStats reads Stats in a read-only transaction: it changes nothing. The
// counts come from envelope_count (envelope.CountBySource: O(sources), not
// a scan), the oldest pending envelope from an index; the failures by cause
// scan the failed envelopes (partial index) and the replays the last day's.
func GetStats(ctx context.Context, pool *pgxpool.Pool) (*Stats, error) {
	st := &Stats{Sources: []SourceStats{}, Failures: []FailureCause{}}
	err := readOnly(ctx, pool, func(tx pgx.Tx, clock envelope.Clock) error {
		now := clock.Now
		st.GeneratedAt = now
		counts, err := envelope.CountBySource(ctx, tx, true)
		if err != nil {
			return err
		}
		arrivals, err := envelope.CountArrivals(ctx, tx)
		if err != nil {
			return err
		}
		st.ArrivalsSince = arrivals.Since
		for _, c := range counts {
			a := arrivals.BySource[c.Source]
			c.ReceivedLastHour, c.ReceivedLast24h = a.ReceivedLastHour, a.ReceivedLast24h
			delete(arrivals.BySource, c.Source)
			st.Sources = append(st.Sources, c)
		}
		// A source whose envelopes are all gone (deleted) may still have
		// arrivals in the window.
		for _, a := range arrivals.BySource {
			st.Sources = append(st.Sources, a)
		}
		slices.SortFunc(st.Sources, func(a, b SourceStats) int { return strings.Compare(a.Source, b.Source) })
		for _, c := range st.Sources {
			st.Totals.Add(c)
		}
		st.Totals.Source = "total"

		o, err := envelope.OldestPending(ctx, tx)
		if err != nil {
			return err
		}
		st.OldestPending = o

		failures, err := envelope.FailureCauses(ctx, tx, "", TopFailures)
		if err != nil {
			return err
		}
		st.Failures = append(st.Failures, failures...)

		st.Replays, err = envelope.CountReplays(ctx, tx, now.Add(-24*time.Hour))
		return err
	})
	if err != nil {
		return nil, err
	}
	return st, nil
}
