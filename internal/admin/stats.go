package admin

import (
	"context"
	"errors"
	"fmt"
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
		rows, err := tx.Query(ctx, `
			WITH e AS (
				SELECT source,
				       count(*) FILTER (WHERE status = 'pending') AS pending,
				       count(*) FILTER (WHERE status = 'done')    AS done,
				       count(*) FILTER (WHERE status = 'failed')  AS failed,
				       count(*) FILTER (WHERE status = 'ignored') AS ignored,
				       count(*)                                   AS total
				  FROM envelope GROUP BY source
			), d AS (
				SELECT e.source, count(*) AS duplicates
				  FROM envelope_duplicate x JOIN envelope e ON e.id = x.envelope_id GROUP BY e.source
			), c AS (
				SELECT source, count(*) AS conflicts FROM envelope_conflict GROUP BY source
			)
			SELECT coalesce(e.source, c.source), coalesce(pending, 0), coalesce(done, 0), coalesce(failed, 0),
			       coalesce(ignored, 0), coalesce(total, 0), coalesce(duplicates, 0), coalesce(conflicts, 0)
			  FROM e LEFT JOIN d ON d.source = e.source FULL JOIN c ON c.source = e.source
			 ORDER BY 1`)
		if err != nil {
			return fmt.Errorf("count by source: %w", err)
		}
		var s SourceStats
		_, err = pgx.ForEachRow(rows, []any{&s.Source, &s.Pending, &s.Done, &s.Failed, &s.Ignored, &s.Total, &s.Duplicates, &s.Conflicts}, func() error {
			st.Sources = append(st.Sources, s)
			t := &st.Totals
			t.Pending += s.Pending
			t.Done += s.Done
			t.Failed += s.Failed
			t.Ignored += s.Ignored
			t.Total += s.Total
			t.Duplicates += s.Duplicates
			t.Conflicts += s.Conflicts
			return nil
		})
		if err != nil {
			return fmt.Errorf("count by source: %w", err)
		}
		st.Totals.Source = "total"

		var o OldestPending
		err = tx.QueryRow(ctx, `
			SELECT id, source, received_at, extract(epoch FROM $2::timestamptz - received_at)::float8
			  FROM envelope WHERE status = $1 ORDER BY received_at, id LIMIT 1`, envelope.StatusPending, now).
			Scan(&o.EnvelopeID, &o.Source, &o.ReceivedAt, &o.AgeSeconds)
		switch {
		case err == nil:
			st.OldestPending = &o
		case !errors.Is(err, pgx.ErrNoRows):
			return fmt.Errorf("find oldest pending: %w", err)
		}

		rows, err = tx.Query(ctx, `
			SELECT g.cause, g.n, g.latest, coalesce((SELECT last_error FROM envelope WHERE id = g.latest), '')
			  FROM (SELECT coalesce(last_cause, '') AS cause, count(*) AS n, max(id) AS latest
			          FROM envelope WHERE status = $1
			         GROUP BY 1 ORDER BY 2 DESC, 1 LIMIT $2) g
			 ORDER BY 2 DESC, 1`, envelope.StatusFailed, TopFailures)
		if err != nil {
			return fmt.Errorf("group failures: %w", err)
		}
		var f FailureCause
		_, err = pgx.ForEachRow(rows, []any{&f.Cause, &f.Count, &f.LatestID, &f.LatestError}, func() error {
			st.Failures = append(st.Failures, f)
			return nil
		})
		if err != nil {
			return fmt.Errorf("group failures: %w", err)
		}

		err = tx.QueryRow(ctx, `
			SELECT count(*), count(DISTINCT envelope_id), count(DISTINCT batch_id)
			  FROM envelope_replay WHERE replayed_at > $1::timestamptz - interval '24 hours'`, now).
			Scan(&st.Replays.Replays, &st.Replays.Envelopes, &st.Replays.Runs)
		if err != nil {
			return fmt.Errorf("count replays: %w", err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return st, nil
}
