package admin

import (
	"context"
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
}

// SourceStats counts one source's envelopes by status, and the duplicate and
// conflicting deliveries it received.
type SourceStats struct {
	Source  string `json:"source"`
	Pending int64  `json:"pending"`
	Done    int64  `json:"done"`
	Failed  int64  `json:"failed"`
	Ignored int64  `json:"ignored"`
	Total   int64  `json:"total"`
	// Duplicates is the sum of envelope.duplicates: deliveries received again
	// with the same id and body.
	Duplicates int64 `json:"duplicates"`
	// Conflicts counts envelope_conflict rows: deliveries that reused an id
	// with another body.
	Conflicts int64 `json:"conflicts"`
}

// OldestPending is the pending envelope received first.
type OldestPending struct {
	EnvelopeID int64     `json:"envelope_id"`
	Source     string    `json:"source"`
	ReceivedAt time.Time `json:"received_at"`
	AgeSeconds float64   `json:"age_seconds"`
}

// FailureCause is one cause of failed envelopes, how many share it, and the
// newest of them as an example. Cause is "" for envelopes that failed
// before causes were recorded (migration 00171).
type FailureCause struct {
	Cause string `json:"cause"`
	Count int64  `json:"count"`
	// LatestID is the newest failed envelope with this cause, and
	// LatestError its last_error.
	LatestID    int64  `json:"latest_id"`
	LatestError string `json:"latest_error"`
}

// ReplayStats counts envelope_replay rows.
type ReplayStats struct {
	Replays   int64 `json:"replays"`
	Envelopes int64 `json:"envelopes"`
	Runs      int64 `json:"runs"` // distinct batch ids
}

// GetStats reads Stats in a read-only transaction: it changes nothing. It
// scans the envelope table once per group (counts, duplicates); on a large
// inbox it takes as long as those scans.
func GetStats(ctx context.Context, pool *pgxpool.Pool) (*Stats, error) {
	st := &Stats{Sources: []SourceStats{}, Failures: []FailureCause{}}
	err := readOnly(ctx, pool, func(tx pgx.Tx, now time.Time) error {
		st.GeneratedAt = now
		counts, err := envelope.CountBySource(ctx, tx, true)
		if err != nil {
			return err
		}
		t := &st.Totals
		for _, c := range counts {
			s := SourceStats{Source: c.Source, Pending: c.Pending, Done: c.Done, Failed: c.Failed, Ignored: c.Ignored,
				Total: c.Total, Duplicates: c.Duplicates, Conflicts: c.Conflicts}
			st.Sources = append(st.Sources, s)
			t.Pending += s.Pending
			t.Done += s.Done
			t.Failed += s.Failed
			t.Ignored += s.Ignored
			t.Total += s.Total
			t.Duplicates += s.Duplicates
			t.Conflicts += s.Conflicts
		}
		st.Totals.Source = "total"

		o, err := envelope.OldestPending(ctx, tx)
		if err != nil {
			return err
		}
		if o != nil {
			st.OldestPending = &OldestPending{EnvelopeID: o.EnvelopeID, Source: o.Source, ReceivedAt: o.ReceivedAt, AgeSeconds: o.AgeSeconds}
		}

		failures, err := envelope.FailureCauses(ctx, tx, "", TopFailures)
		if err != nil {
			return err
		}
		for _, f := range failures {
			st.Failures = append(st.Failures, FailureCause{Cause: f.Cause, Count: f.Count, LatestID: f.LatestID, LatestError: f.LatestError})
		}

		r, err := envelope.CountReplays(ctx, tx, now.Add(-24*time.Hour))
		if err != nil {
			return err
		}
		st.Replays = ReplayStats{Replays: r.Replays, Envelopes: r.Envelopes, Runs: r.Runs}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return st, nil
}
