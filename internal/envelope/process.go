package envelope

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// ErrNotFound is returned when an envelope id does not exist.
var ErrNotFound = errors.New("envelope not found")

// Outcome is what one processing attempt ended in; it is stored in
// envelope_attempt.outcome.
type Outcome string

// Attempt outcomes.
const (
	OutcomeDone    Outcome = "done"
	OutcomeIgnored Outcome = "ignored"
	OutcomeFailed  Outcome = "failed"  // permanent error or attempts exhausted: the envelope failed
	OutcomeRetry   Outcome = "retry"   // a transient error: River retries with backoff
	OutcomeSnoozed Outcome = "snoozed" // not ready or asked to wait: River snoozes, no attempt used
)

// Attempt describes one processing attempt for the audit trail.
type Attempt struct {
	JobID     int64
	Attempt   int
	Outcome   Outcome
	Error     string
	StartedAt time.Time
	Worker    string
}

const envelopeColumns = `id, source, provider, delivery_id, event_type, status,
	body, coalesce(body, convert_to(payload::text, 'UTF8')), headers, body_sha256, signed_at, received_at,
	processed_at, attempts, last_error, result,
	(SELECT count(*) FROM envelope_duplicate d WHERE d.envelope_id = envelope.id),
	(SELECT max(r.replayed_at) FROM envelope_replay r WHERE r.envelope_id = envelope.id)`

func scanEnvelope(row pgx.Row) (*Envelope, error) {
	var e Envelope
	var payload, headers, result []byte
	err := row.Scan(&e.ID, &e.Source, &e.Provider, &e.DeliveryID, &e.EventType, &e.Status,
		&e.Body, &payload, &headers, &e.BodySHA256, &e.SignedAt, &e.ReceivedAt,
		&e.ProcessedAt, &e.Attempts, &e.LastError, &result, &e.Duplicates, &e.LastReplayedAt)
	if err != nil {
		return nil, err
	}
	e.Payload = payload
	if len(result) > 0 {
		e.Result = result
	}
	if err := json.Unmarshal(headers, &e.Headers); err != nil {
		return nil, fmt.Errorf("decode headers of envelope %d: %w", e.ID, err)
	}
	return &e, nil
}

// Lock loads envelope id inside tx and locks its row until tx ends, so no
// other worker can process it meanwhile (FOR NO KEY UPDATE: ingest may still
// record duplicates and conflicts that reference it). Payload holds the raw body (or the
// stored parsed payload once retention dropped the body). It also returns the
// database's clock at the time of the lock.
func Lock(ctx context.Context, tx pgx.Tx, id int64) (*Envelope, time.Time, error) {
	var now time.Time
	if err := tx.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&now); err != nil {
		return nil, now, fmt.Errorf("read clock: %w", err)
	}
	e, err := scanEnvelope(tx.QueryRow(ctx, `SELECT `+envelopeColumns+` FROM envelope WHERE id = $1 FOR NO KEY UPDATE`, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, now, fmt.Errorf("envelope %d: %w", id, ErrNotFound)
	}
	if err != nil {
		return nil, now, fmt.Errorf("lock envelope %d: %w", id, err)
	}
	return e, now, nil
}

// Get loads one envelope without locking it.
func Get(ctx context.Context, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, id int64) (*Envelope, error) {
	e, err := scanEnvelope(q.QueryRow(ctx, `SELECT `+envelopeColumns+` FROM envelope WHERE id = $1`, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("envelope %d: %w", id, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("load envelope %d: %w", id, err)
	}
	return e, nil
}

// ErrNotPending is returned by Finish when the envelope is no longer pending:
// another worker got there first, and the caller must roll back.
var ErrNotPending = errors.New("envelope is no longer pending")

// Finish moves a pending envelope to its final status (done, ignored or
// failed) with its result and error, and records the attempt, inside tx.
// last_error is cleared by done and ignored (the attempts keep the history). It
// is a compare-and-set: when the envelope is not pending it changes nothing
// and returns ErrNotPending.
func Finish(ctx context.Context, tx pgx.Tx, id int64, status Status, result json.RawMessage, a Attempt) error {
	if status == StatusPending {
		return errors.New("finish: status must be final")
	}
	var lastError *string
	if a.Error != "" {
		lastError = &a.Error
	}
	var res []byte
	if len(result) > 0 {
		res = result
	}
	tag, err := tx.Exec(ctx, `
		WITH e AS (
			UPDATE envelope
			   SET status = $2, result = $3,
			       last_error = CASE WHEN $2 = 'failed' THEN coalesce($4, last_error) END,
			       processed_at = clock_timestamp(), attempts = attempts + 1
			 WHERE id = $1 AND status = 'pending'
			RETURNING id
		)
		INSERT INTO envelope_attempt (envelope_id, job_id, attempt, outcome, error, started_at, finished_at, worker)
		SELECT id, nullif($5::bigint, 0), $6, $7, $4, $8, clock_timestamp(), $9 FROM e`,
		id, status, res, lastError, a.JobID, a.Attempt, a.Outcome, a.StartedAt, a.Worker)
	if err != nil {
		return fmt.Errorf("finish envelope %d: %w", id, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("finish envelope %d: %w", id, ErrNotPending)
	}
	return nil
}

// RecordAttempt records an attempt that left the envelope pending (retry or
// snooze): it sets last_error, counts the attempt unless it was a snooze,
// and appends the attempt row. It changes nothing when the envelope is no
// longer pending and reports whether it recorded.
func RecordAttempt(ctx context.Context, tx pgx.Tx, id int64, a Attempt) (bool, error) {
	countIt := a.Outcome != OutcomeSnoozed
	tag, err := tx.Exec(ctx, `
		WITH e AS (
			UPDATE envelope
			   SET last_error = $2, attempts = attempts + CASE WHEN $3 THEN 1 ELSE 0 END
			 WHERE id = $1 AND status = 'pending'
			RETURNING id
		)
		INSERT INTO envelope_attempt (envelope_id, job_id, attempt, outcome, error, started_at, finished_at, worker)
		SELECT id, nullif($4::bigint, 0), $5, $6, $2, $7, clock_timestamp(), $8 FROM e`,
		id, a.Error, countIt, a.JobID, a.Attempt, a.Outcome, a.StartedAt, a.Worker)
	if err != nil {
		return false, fmt.Errorf("record attempt of envelope %d: %w", id, err)
	}
	return tag.RowsAffected() > 0, nil
}
