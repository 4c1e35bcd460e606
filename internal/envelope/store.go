package envelope

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
)

// Store is the envelope table's PostgreSQL store.
type Store struct {
	pool  *pgxpool.Pool
	river *river.Client[pgx.Tx]
}

// NewStore returns a Store. client may be an insert-only River client (one
// with no queues); it is used to enqueue processing jobs.
func NewStore(pool *pgxpool.Pool, client *river.Client[pgx.Tx]) *Store {
	return &Store{pool: pool, river: client}
}

// Pool returns the store's pool.
func (s *Store) Pool() *pgxpool.Pool { return s.pool }

// NewDelivery is a verified delivery to store.
type NewDelivery struct {
	Source     string
	Provider   string
	DeliveryID string
	EventType  string
	Body       []byte
	Payload    json.RawMessage
	Headers    map[string]string
	SignedAt   time.Time
	// MaxAttempts for the processing job; 0 keeps the worker's default.
	MaxAttempts int
}

// InsertResult says what Insert did.
type InsertResult struct {
	EnvelopeID int64
	// Duplicate is true when the delivery id was already stored with the same
	// body: nothing new was stored or enqueued.
	Duplicate bool
}

// ConflictError is returned by Insert when the delivery id is already stored
// with a different body. The stored envelope is untouched; the conflicting
// delivery is recorded in envelope_conflict.
type ConflictError struct {
	EnvelopeID int64
	ConflictID int64
}

func (e *ConflictError) Error() string {
	return fmt.Sprintf("delivery id already stored as envelope %d with a different body (conflict %d recorded)", e.EnvelopeID, e.ConflictID)
}

// Insert stores d as a new envelope and enqueues its processing job in the
// same transaction, and returns only after COMMIT. A delivery id already
// stored with the same body records a duplicate (a row in
// envelope_duplicate; it never waits for a worker processing the envelope)
// and enqueues nothing; with a
// different body it records a conflict and returns *ConflictError. Safe to
// call concurrently with the same delivery: exactly one call inserts.
func (s *Store) Insert(ctx context.Context, d NewDelivery) (InsertResult, error) {
	sum := sha256.Sum256(d.Body)
	headers, err := json.Marshal(d.Headers)
	if err != nil {
		return InsertResult{}, fmt.Errorf("encode headers: %w", err)
	}
	var signedAt *time.Time
	if !d.SignedAt.IsZero() {
		signedAt = &d.SignedAt
	}
	payload := jsonbPayload(d.Payload) // nil when jsonb cannot hold it: the raw body is the record

	var res InsertResult
	var conflict *ConflictError
	for try := 0; ; try++ {
		res, conflict, err = s.insertTx(ctx, d, sum[:], headers, signedAt, payload)
		if !errors.Is(err, errVanished) || try == 2 {
			break
		}
	}
	if err != nil {
		return InsertResult{}, err
	}
	if conflict != nil {
		return InsertResult{EnvelopeID: conflict.EnvelopeID}, conflict
	}
	return res, nil
}

// errVanished means the stored delivery a conflict pointed at was deleted
// (retention) before it could be read: the insert is tried again.
var errVanished = errors.New("stored delivery vanished")

// insertTx is one attempt of Insert, in one transaction.
func (s *Store) insertTx(ctx context.Context, d NewDelivery, sum, headers []byte, signedAt *time.Time, payload []byte) (InsertResult, *ConflictError, error) {
	var res InsertResult
	var conflict *ConflictError
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		err := tx.QueryRow(ctx, `
			INSERT INTO envelope (source, provider, delivery_id, event_type, body, payload, headers, body_sha256, body_size, signed_at)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
			ON CONFLICT (source, delivery_id) DO NOTHING
			RETURNING id`,
			d.Source, d.Provider, d.DeliveryID, d.EventType, d.Body, payload, headers, sum, len(d.Body), signedAt,
		).Scan(&res.EnvelopeID)
		switch {
		case err == nil:
			opts := &river.InsertOpts{MaxAttempts: d.MaxAttempts}
			if _, err := s.river.InsertTx(ctx, tx, ProcessArgs{EnvelopeID: res.EnvelopeID, Source: d.Source}, opts); err != nil {
				return fmt.Errorf("enqueue envelope %d: %w", res.EnvelopeID, err)
			}
			return nil
		case !errors.Is(err, pgx.ErrNoRows):
			return fmt.Errorf("insert envelope: %w", err)
		}
		// The delivery id is taken (ON CONFLICT waited for the other
		// transaction to commit). FOR KEY SHARE keeps retention from
		// deleting the row meanwhile, and does not wait for a worker, which
		// holds the row FOR NO KEY UPDATE for its whole transaction.
		var storedSum []byte
		err = tx.QueryRow(ctx, `SELECT id, body_sha256 FROM envelope WHERE source = $1 AND delivery_id = $2 FOR KEY SHARE`,
			d.Source, d.DeliveryID).Scan(&res.EnvelopeID, &storedSum)
		if errors.Is(err, pgx.ErrNoRows) {
			// Deleted by retention between the two statements: insert again.
			return errVanished
		}
		if err != nil {
			return fmt.Errorf("load stored delivery: %w", err)
		}
		if bytes.Equal(storedSum, sum) {
			res.Duplicate = true
			if _, err := tx.Exec(ctx, `INSERT INTO envelope_duplicate (envelope_id) VALUES ($1)`, res.EnvelopeID); err != nil {
				return fmt.Errorf("record duplicate: %w", err)
			}
			return nil
		}
		// Different body: record the conflict, leave the original alone.
		conflict = &ConflictError{EnvelopeID: res.EnvelopeID}
		err = tx.QueryRow(ctx, `
			INSERT INTO envelope_conflict (envelope_id, source, delivery_id, body_sha256, body_size, body, headers)
			VALUES ($1, $2, $3, $4, $5, $6, $7)
			RETURNING id`, res.EnvelopeID, d.Source, d.DeliveryID, sum, len(d.Body), d.Body, headers,
		).Scan(&conflict.ConflictID)
		if err != nil {
			return fmt.Errorf("record conflict: %w", err)
		}
		return nil
	})
	return res, conflict, err
}
