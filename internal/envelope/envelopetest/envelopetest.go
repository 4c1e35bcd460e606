// Package envelopetest makes envelope rows for tests, in any state, without
// each test writing its own INSERT: a Row names what the test cares about and
// every other column takes a valid default (a JSON body with its sha256 and
// size, received now, pending). Adding a column to the envelope table means
// adding it here once.
//
// Rows inserted this way have no River job: a test that processes them
// enqueues the job itself, or goes through envelope.Store as ingest does.
package envelopetest

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// Querier is what Insert needs: a pool, a connection or a transaction.
type Querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Row is one envelope to insert. Zero fields take the defaults shown.
type Row struct {
	Source     string            // "src"
	Provider   string            // "standard"
	DeliveryID string            // unique per process: "d-<n>"
	EventType  string            // "payment.succeeded"
	Status     string            // "pending"
	Body       []byte            // {"delivery":"<DeliveryID>"}; stored as payload too when it is JSON
	NoBody     bool              // body purged (NULL, body_purged_at set); payload kept
	Headers    map[string]string // {}
	// ReceivedAt defaults to now; ProcessedAt, for a final Status, to
	// ReceivedAt (a final envelope must have one).
	ReceivedAt  time.Time
	ProcessedAt time.Time
	Attempts    int
	LastError   string // NULL when empty
	LastCause   string // NULL when empty (a labels.Cause)
	Result      json.RawMessage
}

var seq atomic.Int64

// Insert inserts r and returns its id; it fails the test on any error.
func Insert(t testing.TB, q Querier, r Row) int64 {
	t.Helper()
	id, err := Create(context.Background(), q, r)
	if err != nil {
		t.Fatalf("envelopetest: %v", err)
	}
	return id
}

// Create is Insert for code without a test (an Example): it returns the
// error.
func Create(ctx context.Context, q Querier, r Row) (int64, error) {
	if r.Source == "" {
		r.Source = "src"
	}
	if r.Provider == "" {
		r.Provider = "standard"
	}
	if r.DeliveryID == "" {
		r.DeliveryID = fmt.Sprintf("d-%d", seq.Add(1))
	}
	if r.EventType == "" {
		r.EventType = "payment.succeeded"
	}
	if r.Status == "" {
		r.Status = "pending"
	}
	if r.Body == nil {
		r.Body, _ = json.Marshal(map[string]string{"delivery": r.DeliveryID})
	}
	if r.Headers == nil {
		r.Headers = map[string]string{}
	}
	if r.ReceivedAt.IsZero() {
		r.ReceivedAt = time.Now()
	}
	var processed *time.Time
	if r.Status != "pending" {
		if r.ProcessedAt.IsZero() {
			r.ProcessedAt = r.ReceivedAt
		}
		processed = &r.ProcessedAt
	}
	var payload, result *string
	if json.Valid(r.Body) {
		s := string(r.Body)
		payload = &s
	}
	if r.Result != nil {
		s := string(r.Result)
		result = &s
	}
	var lastError, lastCause *string
	if r.LastError != "" {
		lastError = &r.LastError
	}
	if r.LastCause != "" {
		lastCause = &r.LastCause
	}
	headers, err := json.Marshal(r.Headers)
	if err != nil {
		return 0, err
	}
	sum := sha256.Sum256(r.Body)
	body := r.Body
	var purgedAt *time.Time
	if r.NoBody {
		body, purgedAt = nil, &r.ReceivedAt
	}
	var id int64
	err = q.QueryRow(ctx, `
		INSERT INTO envelope (source, provider, delivery_id, event_type, status, body, payload, headers,
		                      body_sha256, body_size, received_at, processed_at, attempts, last_error, result, body_purged_at, last_cause)
		VALUES ($1, $2, $3, $4, $5, $6, $7::jsonb, $8::jsonb, $9, $10, $11, $12, $13, $14, $15::jsonb, $16, $17)
		RETURNING id`,
		r.Source, r.Provider, r.DeliveryID, r.EventType, r.Status, body, payload, string(headers),
		sum[:], len(r.Body), r.ReceivedAt, processed, r.Attempts, lastError, result, purgedAt, lastCause).Scan(&id)
	if err != nil {
		return 0, fmt.Errorf("insert envelope %s/%s: %w", r.Source, r.DeliveryID, err)
	}
	return id, nil
}
