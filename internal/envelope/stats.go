package envelope

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inboxhq/inbox/internal/pg"
)

// SourceCounts counts one source's envelopes by status and, when asked,
// the duplicate and conflicting deliveries it received. Its JSON is admin
// stats' (a new status is a field here, in Of, Add and countsByStatus).
type SourceCounts struct {
	Source  string `json:"source"`
	Pending int64  `json:"pending"`
	Done    int64  `json:"done"`
	Failed  int64  `json:"failed"`
	Ignored int64  `json:"ignored"`
	// Resolved are failed envelopes an operator closed: not failures.
	Resolved int64 `json:"resolved"`
	Total    int64 `json:"total"`
	// Duplicates counts envelope_duplicate rows (the same id and body
	// received again) and Conflicts envelope_conflict rows (an id reused
	// with another body); both 0 unless CountBySource was asked for them.
	Duplicates int64 `json:"duplicates"`
	Conflicts  int64 `json:"conflicts"`
	// ReceivedLastHour and ReceivedLast24h count the envelopes received
	// (stored, by received_at, to the minute) in the last hour and the last
	// 24 hours, whatever became of them since; both 0 unless CountArrivals
	// filled them.
	ReceivedLastHour int64 `json:"received_last_hour"`
	ReceivedLast24h  int64 `json:"received_last_24h"`
}

// Add adds o's counts to c's (its Source stays c's).
func (c *SourceCounts) Add(o SourceCounts) {
	c.Pending += o.Pending
	c.Done += o.Done
	c.Failed += o.Failed
	c.Ignored += o.Ignored
	c.Resolved += o.Resolved
	c.Total += o.Total
	c.Duplicates += o.Duplicates
	c.Conflicts += o.Conflicts
	c.ReceivedLastHour += o.ReceivedLastHour
	c.ReceivedLast24h += o.ReceivedLast24h
}

// Of returns the count of status.
func (c SourceCounts) Of(status Status) int64 {
	switch status {
	case StatusPending:
		return c.Pending
	case StatusDone:
		return c.Done
	case StatusFailed:
		return c.Failed
	case StatusIgnored:
		return c.Ignored
	case StatusResolved:
		return c.Resolved
	}
	return 0
}

// Statuses are the envelope statuses, in the order they are reported.
func Statuses() []Status {
	return []Status{StatusPending, StatusDone, StatusFailed, StatusIgnored, StatusResolved}
}

// CountBySource counts envelopes per source and status, sorted by source,
// from envelope_count (migration 00180): the deltas that the statements
// changing envelopes append, summed. Its cost grows with the sources and
// with the deltas appended since the last CompactCounts (a minute's worth
// while the worker runs), never with the envelopes kept. With repeats it
// also counts the duplicates and conflicts each source received, and lists
// sources that have only conflicts. The counts are those of the snapshot
// that reads them: exact, as a count(*) in the same snapshot would be.
func CountBySource(ctx context.Context, q pg.Querier, repeats bool) ([]SourceCounts, error) {
	rows, err := q.Query(ctx, `
		SELECT source,
		       coalesce(sum(n) FILTER (WHERE kind = 'pending'), 0)::bigint,
		       coalesce(sum(n) FILTER (WHERE kind = 'done'), 0)::bigint,
		       coalesce(sum(n) FILTER (WHERE kind = 'failed'), 0)::bigint,
		       coalesce(sum(n) FILTER (WHERE kind = 'ignored'), 0)::bigint,
		       coalesce(sum(n) FILTER (WHERE kind = 'resolved'), 0)::bigint,
		       coalesce(sum(n) FILTER (WHERE kind IN ('pending', 'done', 'failed', 'ignored', 'resolved')), 0)::bigint,
		       coalesce(sum(n) FILTER (WHERE kind = 'duplicate'), 0)::bigint,
		       coalesce(sum(n) FILTER (WHERE kind = 'conflict'), 0)::bigint
		  FROM envelope_count
		 GROUP BY source
		HAVING coalesce(sum(n) FILTER (WHERE kind IN ('pending', 'done', 'failed', 'ignored', 'resolved')), 0) <> 0
		    OR ($1 AND coalesce(sum(n) FILTER (WHERE kind = 'conflict'), 0) <> 0)
		 ORDER BY source`, repeats)
	if err != nil {
		return nil, fmt.Errorf("count envelopes by source: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (SourceCounts, error) {
		var c SourceCounts
		err := r.Scan(&c.Source, &c.Pending, &c.Done, &c.Failed, &c.Ignored, &c.Resolved, &c.Total, &c.Duplicates, &c.Conflicts)
		if !repeats {
			c.Duplicates, c.Conflicts = 0, 0
		}
		return c, err
	})
	if err != nil {
		return nil, fmt.Errorf("count envelopes by source: %w", err)
	}
	return out, nil
}

// CompactCounts folds envelope_count's deltas into one row per source and
// kind, and envelope_arrival's into one row per source and minute (dropping
// the minutes older than 25 hours), and returns how many rows it folded or
// dropped (0 when another compaction was running: they take turns, and the
// loser skips). It never blocks a writer and never changes a count. The
// worker's reconcile runs it every minute.
func CompactCounts(ctx context.Context, q pg.Querier) (int64, error) {
	var n int64
	if err := q.QueryRow(ctx, `SELECT envelope_count_compact() + envelope_arrival_compact()`).Scan(&n); err != nil {
		return 0, fmt.Errorf("compact envelope counts: %w", err)
	}
	return n, nil
}

// Arrivals are the envelopes each source received in the last hour and the
// last 24 hours before the snapshot's now(), from envelope_arrival (one row
// per source and minute after compaction: O(sources x minutes), never a read
// of the envelopes). A window is whole minutes: those that start after
// now() minus the window, so the current minute counts so far and the
// oldest one in full.
type Arrivals struct {
	// BySource maps a source to its counts; only ReceivedLastHour and
	// ReceivedLast24h are set.
	BySource map[string]SourceCounts
	// Since is when counting started (migration 00198 applied), when that
	// was less than 24 hours ago: a window that starts before it counts
	// only what was received after. Nil otherwise.
	Since *time.Time
}

// CountArrivals reads Arrivals.
func CountArrivals(ctx context.Context, q pg.Querier) (Arrivals, error) {
	a := Arrivals{BySource: map[string]SourceCounts{}}
	rows, err := q.Query(ctx, `
		SELECT source,
		       coalesce(sum(n) FILTER (WHERE minute > now() - interval '1 hour'), 0)::bigint,
		       coalesce(sum(n), 0)::bigint,
		       min(minute)
		  FROM envelope_arrival
		 WHERE minute > now() - interval '24 hours'
		 GROUP BY source`)
	if err != nil {
		return Arrivals{}, fmt.Errorf("count arrivals: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var c SourceCounts
		var since time.Time
		if err := rows.Scan(&c.Source, &c.ReceivedLastHour, &c.ReceivedLast24h, &since); err != nil {
			return Arrivals{}, fmt.Errorf("count arrivals: %w", err)
		}
		if c.Source == "" { // the migration's marker: when counting started
			a.Since = &since
			continue
		}
		a.BySource[c.Source] = c
	}
	if err := rows.Err(); err != nil {
		return Arrivals{}, fmt.Errorf("count arrivals: %w", err)
	}
	return a, nil
}

// Waiting is the pending envelope received first.
type Waiting struct {
	EnvelopeID int64     `json:"envelope_id"`
	Source     string    `json:"source"`
	ReceivedAt time.Time `json:"received_at"`
	// AgeSeconds is the database's now() (its transaction's start) minus
	// ReceivedAt.
	AgeSeconds float64 `json:"age_seconds"`
}

// OldestPending returns the pending envelope received first (the lowest
// id among equals), or nil when none is pending.
func OldestPending(ctx context.Context, q pg.Querier) (*Waiting, error) {
	var w Waiting
	err := q.QueryRow(ctx, `
		SELECT id, source, received_at, extract(epoch FROM now() - received_at)::float8
		  FROM envelope WHERE status = $1 ORDER BY received_at, id LIMIT 1`, StatusPending).
		Scan(&w.EnvelopeID, &w.Source, &w.ReceivedAt, &w.AgeSeconds)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("find oldest pending envelope: %w", err)
	}
	return &w, nil
}

// FailureCause is one cause of failed envelopes (envelope.last_cause, ""
// for those that failed before causes were recorded), how many share it,
// and the newest of them with its last_error.
type FailureCause struct {
	Cause string `json:"cause"`
	Count int64  `json:"count"`
	// LatestID is the newest failed envelope with this cause, and
	// LatestError its last_error.
	LatestID    int64  `json:"latest_id"`
	LatestError string `json:"latest_error"`
}

// FailureCauses groups failed envelopes of source ("" for every source) by
// cause, most frequent first (then by cause), at most limit of them. The
// counts come from envelope_count (migration 00191), the newest envelope of
// each cause from envelope_failed_cause_idx: its cost grows with the causes
// and the partitions, never with the failures kept.
func FailureCauses(ctx context.Context, q pg.Querier, source string, limit int) ([]FailureCause, error) {
	rows, err := q.Query(ctx, `
		SELECT c.cause, c.n, coalesce(l.id, 0), coalesce(l.last_error, '')
		  FROM (SELECT cause, sum(n)::bigint AS n FROM envelope_count
		         WHERE kind = $1 AND ($3 = '' OR source = $3)
		         GROUP BY 1 HAVING sum(n) <> 0 ORDER BY 2 DESC, 1 LIMIT $2) c
		  LEFT JOIN LATERAL (
		        SELECT e.id, e.last_error FROM envelope e
		         WHERE e.status = $1 AND coalesce(e.last_cause, '') = c.cause AND ($3 = '' OR e.source = $3)
		         ORDER BY e.id DESC LIMIT 1) l ON true
		 ORDER BY 2 DESC, 1`, StatusFailed, limit, source)
	if err != nil {
		return nil, fmt.Errorf("group failures: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (FailureCause, error) {
		var f FailureCause
		err := r.Scan(&f.Cause, &f.Count, &f.LatestID, &f.LatestError)
		return f, err
	})
	if err != nil {
		return nil, fmt.Errorf("group failures: %w", err)
	}
	return out, nil
}

// ReplayCounts counts envelope_replay rows since a time.
type ReplayCounts struct {
	Replays   int64 `json:"replays"`
	Envelopes int64 `json:"envelopes"`
	Runs      int64 `json:"runs"` // distinct batch ids
}

// CountReplays counts the replays recorded after since.
func CountReplays(ctx context.Context, q pg.Querier, since time.Time) (ReplayCounts, error) {
	var c ReplayCounts
	err := q.QueryRow(ctx, `
		SELECT count(*), count(DISTINCT envelope_id), count(DISTINCT batch_id)
		  FROM envelope_replay WHERE replayed_at > $1`, since).Scan(&c.Replays, &c.Envelopes, &c.Runs)
	if err != nil {
		return c, fmt.Errorf("count replays: %w", err)
	}
	return c, nil
}
