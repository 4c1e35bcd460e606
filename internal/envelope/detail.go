package envelope

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inboxhq/inbox/internal/pg"
)

// Detail is one envelope row as an operator reads it: its Summary and the
// rest of its columns but the parsed payload.
type Detail struct {
	Summary
	Headers    map[string]string
	BodySHA256 []byte
	// Body is nil when it was purged, or not asked for.
	Body            []byte
	BodyPurgedAt    *time.Time
	SignedAt        *time.Time
	Result          json.RawMessage
	LastDuplicateAt *time.Time
	Origin          string
	BackfillRunID   *int64
	TraceContext    *string
}

// LoadDetail reads envelope id, with its body unless noBody (then it is not
// even read). An unknown id returns an error wrapping ErrNotFound.
func LoadDetail(ctx context.Context, q pg.Querier, id int64, noBody bool) (*Detail, error) {
	var d Detail
	var result []byte
	dest := append(summaryDest(&d.Summary), &d.Headers, &d.BodySHA256, &d.Body, &d.BodyPurgedAt, &d.SignedAt, &result,
		&d.LastDuplicateAt, &d.Origin, &d.BackfillRunID, &d.TraceContext)
	err := q.QueryRow(ctx, `
		SELECT `+summaryColumnsWithin([]string{"= $1"})+`, headers, body_sha256,
		       CASE WHEN $2 THEN NULL ELSE coalesce(envelope.body, (SELECT b.body FROM envelope_body b WHERE b.id = $1)) END,
		       CASE WHEN envelope.body IS NULL AND envelope.payload IS NULL AND NOT EXISTS (SELECT 1 FROM envelope_body b WHERE b.id = $1)
		            THEN coalesce(body_purged_at, envelope_body_dropped_at(envelope.id)) END,
		       signed_at, result,
		       (SELECT max(d.received_at) FROM envelope_duplicate d WHERE d.envelope_id = $1),
		       origin, backfill_run_id, trace_context
		  FROM envelope WHERE id = $1`, id, noBody).Scan(dest...)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("envelope %d: %w", id, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("load envelope %d: %w", id, err)
	}
	if len(result) > 0 {
		d.Result = result
	}
	return &d, nil
}

// AttemptRow is an envelope_attempt row.
type AttemptRow struct {
	ID         int64     `json:"id"`
	JobID      *int64    `json:"job_id"`
	Attempt    int       `json:"attempt"`
	Outcome    string    `json:"outcome"`
	Error      *string   `json:"error"`
	Cause      *string   `json:"cause"`
	StartedAt  time.Time `json:"started_at"`
	FinishedAt time.Time `json:"finished_at"`
	DurationMS float64   `json:"duration_ms"`
	Worker     *string   `json:"worker"`
}

// Attempts returns envelope id's attempts, oldest first (empty, not nil,
// when none).
func Attempts(ctx context.Context, q pg.Querier, id int64) ([]AttemptRow, error) {
	return collectOf(ctx, q, `
		SELECT id, job_id, attempt, outcome, error, cause, started_at, finished_at, coalesce(duration_ms, 0), worker
		  FROM envelope_attempt WHERE envelope_id = $1 ORDER BY id`, id,
		func(r pgx.Rows, a *AttemptRow) error {
			return r.Scan(&a.ID, &a.JobID, &a.Attempt, &a.Outcome, &a.Error, &a.Cause, &a.StartedAt, &a.FinishedAt, &a.DurationMS, &a.Worker)
		}, "load attempts")
}

// ReplayRow is an envelope_replay row.
type ReplayRow struct {
	ID          int64           `json:"id"`
	Actor       string          `json:"actor"`
	Reason      string          `json:"reason"`
	Filter      json.RawMessage `json:"filter"`
	BatchID     *string         `json:"batch_id"`
	PriorStatus string          `json:"prior_status"`
	JobID       *int64          `json:"job_id"`
	ReplayedAt  time.Time       `json:"replayed_at"`
}

// Replays returns envelope id's replays, oldest first (empty, not nil,
// when none).
func Replays(ctx context.Context, q pg.Querier, id int64) ([]ReplayRow, error) {
	return collectOf(ctx, q, `
		SELECT id, actor, reason, filter, batch_id::text, prior_status, job_id, replayed_at
		  FROM envelope_replay WHERE envelope_id = $1 ORDER BY id`, id,
		func(r pgx.Rows, x *ReplayRow) error {
			return r.Scan(&x.ID, &x.Actor, &x.Reason, &x.Filter, &x.BatchID, &x.PriorStatus, &x.JobID, &x.ReplayedAt)
		}, "load replays")
}

// ConflictRow is an envelope_conflict row without its body.
type ConflictRow struct {
	ID         int64
	DeliveryID string
	BodySHA256 []byte
	BodySize   int
	Headers    map[string]string
	ReceivedAt time.Time
}

// Conflicts returns the deliveries that reused envelope id's delivery id
// with another body, oldest first (empty, not nil, when none).
func Conflicts(ctx context.Context, q pg.Querier, id int64) ([]ConflictRow, error) {
	return collectOf(ctx, q, `
		SELECT id, delivery_id, body_sha256, body_size, headers, received_at
		  FROM envelope_conflict WHERE envelope_id = $1 ORDER BY id`, id,
		func(r pgx.Rows, c *ConflictRow) error {
			return r.Scan(&c.ID, &c.DeliveryID, &c.BodySHA256, &c.BodySize, &c.Headers, &c.ReceivedAt)
		}, "load conflicts")
}

// collectOf runs a query whose one argument is id and scans each row with
// scan; it returns an empty, non-nil slice when there are no rows, and
// errors prefixed with what.
func collectOf[T any](ctx context.Context, q pg.Querier, sql string, id int64, scan func(pgx.Rows, *T) error, what string) ([]T, error) {
	rows, err := q.Query(ctx, sql, id)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	defer rows.Close()
	out := []T{}
	for rows.Next() {
		var v T
		if err := scan(rows, &v); err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		out = append(out, v)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return out, nil
}
