// Package envelope owns the envelope: one verified webhook delivery, its
// status, and its PostgreSQL store. Every statement on the envelope tables
// (envelope, envelope_attempt, envelope_duplicate, envelope_conflict,
// envelope_replay) and every lookup of river_job by envelope id is here:
// insert together with the processing job, lock, load, record attempts and
// outcomes (process.go, store.go); the jobs of envelopes (jobs.go) and the
// orphans reconcile repairs (orphan.go); selections, summaries and replay
// batches for admin (selection.go, replay.go, detail.go); retention's purge
// batches (purge.go); the counts admin stats and metrics read (stats.go).
// The packages with policy (admin, retention, metrics, the worker's
// reconcile) decide what to do and call these functions, which take a
// pg.Querier or DB: a pool, a connection or a transaction.
//
// Every processing job is inserted by ProcessJob, whichever path enqueues it
// (Store.Insert for ingest and backfill, the admin replay, the worker's
// reconcile). The job's max_attempts is only River's backstop: the source's
// max_attempts where the path knows it (Store.Insert), River's default (25)
// where it does not (replay, reconcile). Whether an attempt exhausts the
// envelope is decided in one place, the worker's decision, from the
// source's max_attempts in the worker's own configuration and the job's:
// the lower one applies, so a replayed or reconciled envelope is bounded
// like a fresh one.
//
// Of this module it imports only groupcommit, pg and provider (for a
// delivery's document, Envelope.Document); it must not import handlers,
// worker, ingest, admin, retention or metrics.
package envelope

import (
	"encoding/json"
	"time"

	"github.com/inboxhq/inbox/internal/provider"
)

// Status is an envelope's processing state.
type Status string

// Envelope statuses. pending is the only non-final one.
const (
	StatusPending Status = "pending"
	StatusDone    Status = "done"
	StatusFailed  Status = "failed"  // gave up: permanent error or attempts exhausted
	StatusIgnored Status = "ignored" // no handler for its event type
	// StatusResolved is a failed envelope an operator closed, with a reason
	// (envelope_resolution); un-resolving makes it failed again.
	StatusResolved Status = "resolved"
)

// Envelope is one stored delivery.
type Envelope struct {
	ID         int64  `json:"id"`
	Source     string `json:"source"`
	Provider   string `json:"provider"`
	DeliveryID string `json:"delivery_id"`
	EventType  string `json:"event_type"`
	Status     Status `json:"status"`
	// Body is the raw bytes as received, what the signature was computed
	// over; nil once retention purged them.
	Body []byte `json:"-"`
	// payload is the stored jsonb copy of the delivery's document, as
	// PostgreSQL renders it (keys reordered, whitespace gone): loaded only
	// once Body is purged. Read through Document (the event) or
	// BodyOrPayload (bytes to pass on).
	payload     json.RawMessage
	Headers     map[string]string `json:"headers"`
	BodySHA256  []byte            `json:"body_sha256"`
	SignedAt    *time.Time        `json:"signed_at,omitempty"`
	ReceivedAt  time.Time         `json:"received_at"`
	ProcessedAt *time.Time        `json:"processed_at,omitempty"`
	Attempts    int               `json:"attempts"`
	LastError   *string           `json:"last_error,omitempty"`
	Result      json.RawMessage   `json:"result,omitempty"`
	// LastReplayedAt is when an operator last replayed the envelope.
	LastReplayedAt *time.Time `json:"last_replayed_at,omitempty"`
	// TraceContext is the W3C traceparent of the ingest request that stored
	// it, "" when tracing was off (package tracing).
	TraceContext string `json:"trace_context,omitempty"`
}

// BodyOrPayload is the delivery's content as bytes to pass on (forwarding
// sends it): the raw Body, or, once retention purged it, the stored jsonb
// copy of its document (the provider's JSON, not the same bytes); nil when
// neither is left. Handlers read their event with Document, which is the
// same document before and after the purge whatever the encoding.
func (e *Envelope) BodyOrPayload() []byte {
	if e.Body != nil {
		return e.Body
	}
	if len(e.payload) == 0 {
		return nil
	}
	return e.payload
}

// WithBodyPurged returns a copy of e as retention leaves it: no Body, and
// stored, the parsed copy of its document that ingest kept (nil: none was
// kept, as for a body that was not JSON). For tests of what a handler or
// forwarding does with a purged envelope; the worker loads the real thing.
func (e Envelope) WithBodyPurged(stored json.RawMessage) *Envelope {
	e.Body = nil
	e.payload = stored
	return &e
}

// Document is the envelope's JSON document, as its provider defines it and
// whether or not retention dropped its body: from the raw body,
// provider.Document (a GitHub form-encoded delivery's "payload" field, any
// other delivery's body); once the body is dropped, the parsed copy ingest
// stored by the same rule. nil when there is neither. Handlers read their
// event from it; the raw body (Body) is the signed record.
func (e *Envelope) Document() []byte {
	if e.Body != nil {
		return provider.Document(e.Provider, e.Headers["Content-Type"], e.Body)
	}
	if len(e.payload) == 0 {
		return nil
	}
	return e.payload
}

// WaitingSince is when the envelope's current processing began: its last
// replay, else its receipt. Snoozing is bounded from here.
func (e *Envelope) WaitingSince() time.Time {
	if e.LastReplayedAt != nil && e.LastReplayedAt.After(e.ReceivedAt) {
		return *e.LastReplayedAt
	}
	return e.ReceivedAt
}
