package envelopetest

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"testing"
	"time"

	"github.com/inboxhq/inbox/internal/pg"
)

// Attempt is one envelope_attempt row (a processing attempt). Zero fields
// take the defaults shown.
type Attempt struct {
	EnvelopeID int64  // required
	JobID      int64  // NULL when 0
	Attempt    int    // 1
	Outcome    string // "done"; also "ignored", "failed", "retry", "snoozed"
	Error      string // NULL when empty
	StartedAt  time.Time
	// FinishedAt defaults to StartedAt, which defaults to now.
	FinishedAt time.Time
	Worker     string // NULL when empty
}

// InsertAttempt inserts a and returns its id; it fails the test on any
// error.
func InsertAttempt(t testing.TB, q pg.Querier, a Attempt) int64 {
	t.Helper()
	if a.Attempt == 0 {
		a.Attempt = 1
	}
	if a.Outcome == "" {
		a.Outcome = "done"
	}
	if a.StartedAt.IsZero() {
		a.StartedAt = time.Now()
	}
	if a.FinishedAt.IsZero() {
		a.FinishedAt = a.StartedAt
	}
	return insertRelated(t, q, "attempt", `
		INSERT INTO envelope_attempt (envelope_id, job_id, attempt, outcome, error, started_at, finished_at, worker)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8) RETURNING id`,
		a.EnvelopeID, nullableID(a.JobID), a.Attempt, a.Outcome, nullable(a.Error), a.StartedAt, a.FinishedAt, nullable(a.Worker))
}

// Replay is one envelope_replay row (an operator's replay of an envelope).
// Zero fields take the defaults shown.
type Replay struct {
	EnvelopeID  int64           // required
	Actor       string          // "alice"
	Reason      string          // "test"
	Filter      json.RawMessage // {}
	BatchID     string          // a uuid; NULL when empty (a replay by id, not a bulk run)
	PriorStatus string          // "failed"
	JobID       int64           // NULL when 0
	ReplayedAt  time.Time       // now
}

// InsertReplay inserts r and returns its id; it fails the test on any error.
func InsertReplay(t testing.TB, q pg.Querier, r Replay) int64 {
	t.Helper()
	if r.Actor == "" {
		r.Actor = "alice"
	}
	if r.Reason == "" {
		r.Reason = "test"
	}
	if r.Filter == nil {
		r.Filter = json.RawMessage(`{}`)
	}
	if r.PriorStatus == "" {
		r.PriorStatus = "failed"
	}
	if r.ReplayedAt.IsZero() {
		r.ReplayedAt = time.Now()
	}
	return insertRelated(t, q, "replay", `
		INSERT INTO envelope_replay (envelope_id, actor, reason, filter, batch_id, prior_status, job_id, replayed_at)
		VALUES ($1, $2, $3, $4::jsonb, $5::uuid, $6, $7, $8) RETURNING id`,
		r.EnvelopeID, r.Actor, r.Reason, string(r.Filter), nullable(r.BatchID), r.PriorStatus, nullableID(r.JobID), r.ReplayedAt)
}

// Conflict is one envelope_conflict row: a delivery that reused the
// envelope's delivery id with another body. Its source and delivery id are
// the envelope's, its digest and size its body's. Zero fields take the
// defaults shown.
type Conflict struct {
	EnvelopeID int64             // required
	Body       []byte            // "other"
	Headers    map[string]string // {}
	ReceivedAt time.Time         // now
}

// InsertConflict inserts c and returns its id; it fails the test on any
// error, an envelope that does not exist included.
func InsertConflict(t testing.TB, q pg.Querier, c Conflict) int64 {
	t.Helper()
	if c.Body == nil {
		c.Body = []byte("other")
	}
	if c.Headers == nil {
		c.Headers = map[string]string{}
	}
	if c.ReceivedAt.IsZero() {
		c.ReceivedAt = time.Now()
	}
	headers, err := json.Marshal(c.Headers)
	if err != nil {
		t.Fatalf("envelopetest: conflict: %v", err)
	}
	sum := sha256.Sum256(c.Body)
	return insertRelated(t, q, "conflict", `
		INSERT INTO envelope_conflict (envelope_id, source, delivery_id, body_sha256, body_size, body, headers, received_at)
		SELECT id, source, delivery_id, $2, $3, $4, $5::jsonb, $6 FROM envelope WHERE id = $1 RETURNING id`,
		c.EnvelopeID, sum[:], len(c.Body), c.Body, string(headers), c.ReceivedAt)
}

// InsertDuplicate inserts an envelope_duplicate row (a provider's
// redelivery of the same body) for envelope id, received at (now when zero),
// and returns its id; it fails the test on any error.
func InsertDuplicate(t testing.TB, q pg.Querier, id int64, at time.Time) int64 {
	t.Helper()
	if at.IsZero() {
		at = time.Now()
	}
	return insertRelated(t, q, "duplicate", `
		INSERT INTO envelope_duplicate (envelope_id, received_at) VALUES ($1, $2) RETURNING id`, id, at)
}

// insertRelated runs sql, an INSERT of one row RETURNING id, and returns the
// id; it fails t naming what on any error, no row included.
func insertRelated(t testing.TB, q pg.Querier, what, sql string, args ...any) int64 {
	t.Helper()
	var id int64
	if err := q.QueryRow(context.Background(), sql, args...).Scan(&id); err != nil {
		t.Fatalf("envelopetest: insert %s of envelope %v: %v", what, args[0], err)
	}
	return id
}

// nullableID is id, or nil (NULL) when it is 0.
func nullableID(id int64) *int64 {
	if id == 0 {
		return nil
	}
	return &id
}
