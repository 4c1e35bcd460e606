package handlers

import (
	"context"
	"encoding/json"
	"sync"

	"github.com/jackc/pgx/v5"

	"github.com/inboxhq/inbox/internal/envelope"
	"github.com/inboxhq/inbox/internal/provider"
)

// Handler applies one envelope's effects inside tx, the worker's transaction,
// and returns the JSON the worker stores as envelope.result. It must not
// begin, commit or roll back tx, and must be safe to run again for the same
// envelope (after a crash, or an operator's replay): effects go through
// idempotent writes such as ledger.Post.
//
// Errors: *PermanentError (never retried), *NotReadyError and
// *RetryAfterError (snoozed); any other error is retried with backoff.
type Handler interface {
	Handle(ctx context.Context, tx pgx.Tx, env *envelope.Envelope) (json.RawMessage, error)
}

// HandlerFunc adapts a function to Handler.
type HandlerFunc func(ctx context.Context, tx pgx.Tx, env *envelope.Envelope) (json.RawMessage, error)

// Handle calls f.
func (f HandlerFunc) Handle(ctx context.Context, tx pgx.Tx, env *envelope.Envelope) (json.RawMessage, error) {
	return f(ctx, tx, env)
}

// Wildcard is the event type that matches every event of a provider.
const Wildcard = "*"

type route struct{ provider, eventType string }

// Registry maps (provider, event type) to a Handler: a plain map, and the
// innermost Router (see Router for the decorators that wrap it). It is safe
// for concurrent use.
type Registry struct {
	mu       sync.RWMutex
	handlers map[route]Handler
}

// NewRegistry returns an empty Registry.
func NewRegistry() *Registry {
	return &Registry{handlers: make(map[route]Handler)}
}

// Register routes the provider's eventType to h; eventType Wildcard ("*")
// takes every event of the provider that has no exact route. A later Register
// of the same pair replaces the earlier handler, so built-ins can be
// overridden. It panics on an empty provider or event type or a nil handler,
// which are programming errors.
func (r *Registry) Register(provider, eventType string, h Handler) {
	if provider == "" || eventType == "" || h == nil {
		panic("handlers: Register needs a provider, an event type and a handler")
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.handlers[route{provider, eventType}] = h
}

// Lookup returns the handler for the provider's eventType: the exact route if
// there is one, else the provider's wildcard. false means no handler, and
// the envelope is to be ignored.
func (r *Registry) Lookup(provider, eventType string) (Handler, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if h, ok := r.handlers[route{provider, eventType}]; ok {
		return h, true
	}
	h, ok := r.handlers[route{provider, Wildcard}]
	return h, ok
}

// Route implements Router: Lookup(env.Provider, env.EventType).
func (r *Registry) Route(env *envelope.Envelope) (Handler, bool) {
	return r.Lookup(env.Provider, env.EventType)
}

// Outbound implements Router: false, the registry's handlers make no
// outbound calls of their own.
func (r *Registry) Outbound(string) bool { return false }

// Builtin returns a new Registry holding the built-in handlers (see the
// package documentation). Callers may Register more on it.
func Builtin() *Registry {
	r := NewRegistry()
	r.Register(provider.Stripe, "payment_intent.succeeded", HandlerFunc(stripePaymentIntentSucceeded))
	r.Register(provider.Stripe, "charge.refunded", HandlerFunc(stripeChargeRefunded))
	r.Register(provider.Stripe, "charge.refund.updated", HandlerFunc(stripeRefundUpdated))
	r.Register(provider.Stripe, "refund.updated", HandlerFunc(stripeRefundUpdated))
	r.Register(provider.Stripe, "refund.failed", HandlerFunc(stripeRefundUpdated))
	r.Register(provider.Standard, "payment.succeeded", HandlerFunc(standardPaymentSucceeded))
	r.Register(provider.Standard, "payment.refunded", HandlerFunc(standardPaymentRefunded))
	r.Register(provider.Shopify, "orders/paid", HandlerFunc(shopifyOrderPaid))
	r.Register(provider.Shopify, "refunds/create", HandlerFunc(shopifyRefundCreated))
	r.Register(provider.GitHub, Wildcard, HandlerFunc(githubRecord))
	return r
}
