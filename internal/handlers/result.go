package handlers

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/inboxhq/inbox/internal/ledger"
)

// PostingResult is the envelope result of the payment handlers.
type PostingResult struct {
	// Posted is true when this run wrote the ledger transaction.
	Posted bool `json:"posted"`
	// LedgerTransactionID is the transaction that records the event: the
	// new one, or the one that already did. Zero when nothing records it
	// (a no-op).
	LedgerTransactionID int64  `json:"ledger_transaction_id,omitempty"`
	Kind                string `json:"kind"`
	IdempotencyKey      string `json:"idempotency_key,omitempty"`
	Merchant            string `json:"merchant"`
	AmountMinor         int64  `json:"amount_minor"`
	Currency            string `json:"currency"`
	// Reason says why nothing was posted, when Posted is false.
	Reason string `json:"reason,omitempty"`
}

// RecordResult is the envelope result of handlers with no ledger effect.
type RecordResult struct {
	Recorded bool   `json:"recorded"`
	Event    string `json:"event"`
}

// Effects is what a handler's run reports besides its result JSON, typed,
// for the caller's counters (the worker's ledger metrics). The caller passes
// a fresh one per run with WithEffects; a run without one reports nothing.
type Effects struct {
	// Posting is the PostingResult the run's result states (the payment
	// handlers'); nil when it states none.
	Posting *PostingResult
}

type effectsKey struct{}

// WithEffects returns ctx with e, which the handlers run under it fill in.
func WithEffects(ctx context.Context, e *Effects) context.Context {
	return context.WithValue(ctx, effectsKey{}, e)
}

// postingResult is the result JSON of r, reported to ctx's Effects.
func postingResult(ctx context.Context, r PostingResult) (json.RawMessage, error) {
	if e, _ := ctx.Value(effectsKey{}).(*Effects); e != nil {
		e.Posting = &r
	}
	return EncodeResult(r)
}

// post posts p for run's envelope with its Ledger and returns the result JSON, with ledger errors
// classified.
func post(ctx context.Context, run Run, p ledger.Posting) (json.RawMessage, error) {
	res, err := run.ledger().Post(ctx, run.Envelope.ID, p)
	if err != nil {
		return nil, classify(fmt.Errorf("post %s %q: %w", p.Kind, p.IdempotencyKey, err))
	}
	return postingResult(ctx, PostingResult{
		Posted:              res.Created,
		LedgerTransactionID: res.TransactionID,
		Kind:                string(p.Kind),
		IdempotencyKey:      p.IdempotencyKey,
		Merchant:            p.Merchant,
		AmountMinor:         p.AmountMinor,
		Currency:            p.Currency,
		Reason:              res.Reason,
	})
}

// noop is the result of an event that needs no posting.
func noop(ctx context.Context, kind ledger.Kind, merchant, currency, reason string) (json.RawMessage, error) {
	return postingResult(ctx, PostingResult{Kind: string(kind), Merchant: merchant, Currency: currency, Reason: reason})
}

// EncodeResult encodes a handler's result (what the worker stores as
// envelope.result), naming the failure as such: for handlers and the
// decorators that build results (forwarding).
func EncodeResult(v any) (json.RawMessage, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("encode result: %w", err)
	}
	return b, nil
}
