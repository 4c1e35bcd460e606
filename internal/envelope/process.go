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

// Outcomes are every attempt outcome, in the order metrics report them.
func Outcomes() []Outcome {
	return []Outcome{OutcomeDone, OutcomeIgnored, OutcomeFailed, OutcomeRetry, OutcomeSnoozed}
}

// Attempt describes one processing attempt for the audit trail.
type Attempt struct {
	JobID   int64
	Attempt int
	Outcome Outcome
	Error   string
	// Cause is the failure's stable code (labels.Cause), stored
	// next to Error; empty for done and ignored attempts.
	Cause     string
	StartedAt time.Time
	Worker    string
}

// envelopeColumns are scanEnvelope's columns, read FROM envelopeFrom. The
// body lives in envelope_body (migration 00200), or in the row itself for
// an envelope stored before it and for the copy a failed one keeps.
const envelopeColumns = `envelope.id, source, provider, delivery_id, event_type, status,
	coalesce(envelope.body, b.body),
	CASE WHEN envelope.body IS NULL AND b.id IS NULL THEN convert_to(envelope.payload::text, 'UTF8') END,
	headers, body_sha256, signed_at, received_at,
	processed_at, attempts, last_error, result,
	(SELECT max(r.replayed_at) FROM envelope_replay r WHERE r.envelope_id = envelope.id),
	coalesce(trace_context, '')`

// envelopeFrom joins the body of the envelopes whose ids are ids (a SQL
// expression: "$1", "ANY($1)"): the join names them too, so the executor
// prunes envelope_body to their partitions before it starts, where the join
// column alone would open every partition kept.
func envelopeFrom(ids string) string {
	return `envelope LEFT JOIN envelope_body b ON b.id = envelope.id AND b.id = ` + ids
}

func scanEnvelope(row pgx.Row) (*Envelope, error) {
	var e Envelope
	var payload, headers, result []byte
	err := row.Scan(&e.ID, &e.Source, &e.Provider, &e.DeliveryID, &e.EventType, &e.Status,
		&e.Body, &payload, &headers, &e.BodySHA256, &e.SignedAt, &e.ReceivedAt,
		&e.ProcessedAt, &e.Attempts, &e.LastError, &result, &e.LastReplayedAt, &e.TraceContext)
	if err != nil {
		return nil, err
	}
	e.payload = payload
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
// record duplicates and conflicts that reference it). Body holds the raw body,
// nil once retention dropped it; Payload the parsed copy only then
// (BodyOrPayload reads whichever is there). It also returns the database's
// clock at the time of the lock.
func Lock(ctx context.Context, tx pgx.Tx, id int64) (*Envelope, time.Time, error) {
	envs, clocks, err := LockMany(ctx, tx, []int64{id}, false)
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("lock envelope %d: %w", id, err)
	}
	e, ok := envs[id]
	if !ok {
		return nil, time.Time{}, fmt.Errorf("envelope %d: %w", id, ErrNotFound)
	}
	return e, clocks[id], nil
}

// Get loads one envelope without locking it.
func Get(ctx context.Context, q pg.Querier, id int64) (*Envelope, error) {
	e, err := scanEnvelope(q.QueryRow(ctx, `SELECT `+envelopeColumns+` FROM `+envelopeFrom("$1")+` WHERE envelope.id = $1`, id))
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

// LockMany is Lock for many envelopes in one statement: it loads and locks
// (FOR NO KEY UPDATE, in id order, so two callers cannot deadlock) those of
// ids that exist, each with the database's clock when its row was locked.
// With skipLocked, rows another transaction holds are left out instead of
// waited for (the caller tells them from missing ones with Existing).
func LockMany(ctx context.Context, tx pgx.Tx, ids []int64, skipLocked bool) (map[int64]*Envelope, map[int64]time.Time, error) {
	q := `SELECT clock_timestamp(), ` + envelopeColumns + ` FROM ` + envelopeFrom("ANY($1)") + ` WHERE envelope.id = ANY($1) ORDER BY envelope.id FOR NO KEY UPDATE OF envelope`
	if skipLocked {
		q += ` SKIP LOCKED`
	}
	rows, err := tx.Query(ctx, q, pg.PlanEachCall, ids)
	if err != nil {
		return nil, nil, fmt.Errorf("lock %d envelopes: %w", len(ids), err)
	}
	defer rows.Close()
	envs := make(map[int64]*Envelope, len(ids))
	clocks := make(map[int64]time.Time, len(ids))
	for rows.Next() {
		var now time.Time
		e, err := scanEnvelope(prefixed{rows, &now})
		if err != nil {
			return nil, nil, fmt.Errorf("lock envelopes: %w", err)
		}
		envs[e.ID], clocks[e.ID] = e, now
	}
	if err := rows.Err(); err != nil {
		return nil, nil, fmt.Errorf("lock %d envelopes: %w", len(ids), err)
	}
	return envs, clocks, nil
}

// prefixed scans one leading column into first, then the rest as usual.
type prefixed struct {
	pgx.Rows
	first *time.Time
}

func (p prefixed) Scan(dest ...any) error { return p.Rows.Scan(append([]any{p.first}, dest...)...) }

// Existing returns which of ids exist, without locking them.
func Existing(ctx context.Context, q pg.Querier, ids []int64) (map[int64]bool, error) {
	rows, err := q.Query(ctx, `SELECT id FROM envelope WHERE id = ANY($1)`, pg.PlanEachCall, ids)
	if err != nil {
		return nil, fmt.Errorf("look up envelopes: %w", err)
	}
	out := make(map[int64]bool, len(ids))
	var id int64
	_, err = pgx.ForEachRow(rows, []any{&id}, func() error {
		out[id] = true
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("look up envelopes: %w", err)
	}
	return out, nil
}

// Record is one attempt's effect on its envelope, for FinishMany.
type Record struct {
	EnvelopeID int64
	// Status is the envelope's status after the attempt: a final one (done,
	// ignored, failed), or pending for a retry or snooze.
	Status Status
	// Result is the handler's result (final statuses only).
	Result  json.RawMessage
	Attempt Attempt
}

// finishManySQL is FinishMany's statement, planned at each call
// (pg.PlanEachCall). Its envelope rows are found through the primary key
// alone, whatever the tables' size and statistics: envelope.id = ANY($1)
// prunes the plan to the partitions that hold the batch, and the status test
// is written so that no index can serve it, a filter on the rows found.
// Written as a join on envelope.status = 'pending', the statement was
// planned, statistics or not, as a walk of the status index over every
// pending envelope: each batch cost O(backlog) once a peak had left one,
// 107 ms and 4,012 buffers for a batch of 60 at 200,000 pending, against
// 4.0 ms and 184 (docs/benchmarks.md, "The worker's plans").
const finishManySQL = `
WITH input AS (
	SELECT * FROM unnest($1::bigint[], $2::text[], $3::jsonb[], $4::text[], $5::bigint[], $6::int[], $7::text[], $8::timestamptz[], $10::text[])
	       AS t(id, status, result, error, job_id, attempt, outcome, started_at, cause)
), e AS (
	UPDATE envelope
	   SET status = i.status,
	       result = CASE WHEN i.status = 'pending' THEN envelope.result ELSE i.result END,
	       last_error = CASE i.status WHEN 'pending' THEN i.error WHEN 'failed' THEN coalesce(i.error, envelope.last_error) END,
	       last_cause = CASE i.status WHEN 'pending' THEN i.cause WHEN 'failed' THEN coalesce(i.cause, envelope.last_cause) END,
	       processed_at = CASE WHEN i.status = 'pending' THEN NULL ELSE clock_timestamp() END,
	       attempts = envelope.attempts + CASE WHEN i.outcome = 'snoozed' THEN 0 ELSE 1 END
	  FROM input i
	 WHERE envelope.id = i.id AND envelope.id = ANY($1) AND (envelope.status = 'pending') IS TRUE
	RETURNING envelope.id
)
INSERT INTO envelope_attempt (envelope_id, job_id, attempt, outcome, error, cause, started_at, finished_at, worker)
SELECT i.id, nullif(i.job_id, 0), i.attempt, i.outcome, i.error, i.cause, i.started_at, clock_timestamp(), $9
  FROM input i JOIN e ON e.id = i.id
RETURNING envelope_id`

// FinishMany records attempts of many envelopes in one statement, each a
// compare-and-set on its envelope being pending: a final Status moves the
// envelope there with its result and error (last_error cleared by done and
// ignored; the attempts keep the history) and sets processed_at; pending
// (a retry or snooze) sets last_error (and last_cause likewise). Every attempt but a snooze counts in
// envelope.attempts, and each appends an envelope_attempt row. It returns
// the ids it recorded: an envelope missing from them was no longer pending,
// and nothing of it changed.
func FinishMany(ctx context.Context, tx pgx.Tx, worker string, recs []Record) (map[int64]bool, error) {
	n := len(recs)
	ids, jobIDs := make([]int64, n), make([]int64, n)
	statuses, outcomes, errs, causes := make([]string, n), make([]string, n), make([]*string, n), make([]*string, n)
	results := make([][]byte, n)
	attempts := make([]int32, n)
	started := make([]time.Time, n)
	for i, r := range recs {
		ids[i], jobIDs[i] = r.EnvelopeID, r.Attempt.JobID
		statuses[i], outcomes[i] = string(r.Status), string(r.Attempt.Outcome)
		if r.Attempt.Error != "" {
			errs[i] = &r.Attempt.Error
		}
		if r.Attempt.Cause != "" {
			causes[i] = &r.Attempt.Cause
		}
		if len(r.Result) > 0 && r.Status != StatusPending {
			results[i] = r.Result
		}
		attempts[i], started[i] = int32(r.Attempt.Attempt), r.Attempt.StartedAt
	}
	rows, err := tx.Query(ctx, finishManySQL, pg.PlanEachCall,
		ids, statuses, results, errs, jobIDs, attempts, outcomes, started, worker, causes)
	if err != nil {
		return nil, fmt.Errorf("record %d attempts: %w", n, err)
	}
	done := make(map[int64]bool, n)
	var id int64
	_, err = pgx.ForEachRow(rows, []any{&id}, func() error {
		done[id] = true
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("record %d attempts: %w", n, err)
	}
	// A failed envelope keeps a copy of its body in its row: an operator may
	// replay it until its partition goes, after its day's bodies (migration
	// 00200). A statement of its own, run only for a batch with a failure:
	// the main one does not read envelope_body, so it is neither planned over
	// its partitions nor re-planned when retention drops one.
	var failed []int64
	for _, r := range recs {
		if r.Status == StatusFailed && done[r.EnvelopeID] {
			failed = append(failed, r.EnvelopeID)
		}
	}
	if len(failed) > 0 {
		if _, err := tx.Exec(ctx, `
			UPDATE envelope e SET body = b.body, payload = b.payload
			  FROM envelope_body b
			 WHERE e.id = ANY($1) AND b.id = ANY($1) AND b.id = e.id AND e.body IS NULL AND e.payload IS NULL`, pg.PlanEachCall, failed); err != nil {
			return nil, fmt.Errorf("keep the bodies of %d failed envelopes: %w", len(failed), err)
		}
	}
	return done, nil
}

// Finish moves a pending envelope to its final status (done, ignored or
// failed) with its result and error, and records the attempt, inside tx.
// last_error is cleared by done and ignored (the attempts keep the history). It
// is a compare-and-set: when the envelope is not pending it changes nothing
// and returns ErrNotPending.
func Finish(ctx context.Context, tx pgx.Tx, id int64, status Status, result json.RawMessage, a Attempt) error {
	if status == StatusPending {
		return errors.New("finish: status must be final")
	}
	done, err := FinishMany(ctx, tx, a.Worker, []Record{{EnvelopeID: id, Status: status, Result: result, Attempt: a}})
	if err != nil {
		return fmt.Errorf("finish envelope %d: %w", id, err)
	}
	if !done[id] {
		return fmt.Errorf("finish envelope %d: %w", id, ErrNotPending)
	}
	return nil
}

// RecordAttempt records an attempt that left the envelope pending (retry or
// snooze): it sets last_error, counts the attempt unless it was a snooze,
// and appends the attempt row. It changes nothing when the envelope is no
// longer pending and reports whether it recorded.
func RecordAttempt(ctx context.Context, tx pgx.Tx, id int64, a Attempt) (bool, error) {
	done, err := FinishMany(ctx, tx, a.Worker, []Record{{EnvelopeID: id, Status: StatusPending, Attempt: a}})
	if err != nil {
		return false, fmt.Errorf("record attempt of envelope %d: %w", id, err)
	}
	return done[id], nil
}
