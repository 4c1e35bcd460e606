package handlers

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5"

	"github.com/inboxhq/inbox/internal/envelope"
	"github.com/inboxhq/inbox/internal/ledger"
	"github.com/inboxhq/inbox/internal/provider"
)

// Handler applies one envelope's effects inside run.Tx, the worker's
// transaction, and returns the JSON the worker stores as envelope.result.
// It must not begin, commit or roll back run.Tx, and must be safe to run
// again for the same envelope (after a crash, or an operator's replay):
// effects go through idempotent writes such as run.Ledger.Post.
//
// Errors: *PermanentError (never retried), *NotReadyError and
// *RetryAfterError (snoozed); any other error is retried with backoff.
type Handler interface {
	Handle(ctx context.Context, run Run) (json.RawMessage, error)
}

// HandlerFunc adapts a function to Handler.
type HandlerFunc func(ctx context.Context, run Run) (json.RawMessage, error)

// Handle calls f.
func (f HandlerFunc) Handle(ctx context.Context, run Run) (json.RawMessage, error) {
	return f(ctx, run)
}

// Run is one run of a handler: everything that changes what the handler
// does arrives here, as values the worker sets where it calls the handler
// (and handlerstest sets the same way), never as context values. The
// context carries only the deadline, the trace and the Effects the caller
// reads back.
type Run struct {
	// Tx is the worker's transaction (a savepoint of it when the batch
	// runs its envelopes one by one): the handler's writes commit with the
	// envelope's status and the job's completion, or not at all.
	Tx pgx.Tx
	// Envelope is the envelope to process, locked by Tx and pending.
	Envelope *envelope.Envelope
	// Ledger posts to the ledger inside Tx, with the worker's account
	// cache, and for the first attempt of a batched envelope, deferred to
	// the batch's one ledger statement; its postings name the envelope's
	// delivery (see ledger.Writer). Nil posts at once, creating accounts
	// inside Tx.
	Ledger *ledger.Writer
	// Account is the provider account configured for the envelope's
	// source (the sources file's account_id), "" when none: the merchant
	// when the payload names none (see Merchant).
	Account string
}

// ledger is r.Ledger, or a Writer that posts at once inside r.Tx and names
// r's envelope's delivery (the worker's Writer names it already).
func (r Run) ledger() *ledger.Writer {
	if r.Ledger != nil {
		return r.Ledger
	}
	w := ledger.NewWriter(r.Tx, nil, nil)
	if r.Envelope == nil {
		return w
	}
	return w.WithDelivery(r.Envelope.Source, r.Envelope.DeliveryID)
}

// Wildcard is the event type pattern that matches every event of a
// provider.
const Wildcard = "*"

type route struct{ provider, eventType string }

// prefixRoute is a route whose pattern ends in "*".
type prefixRoute struct {
	prefix string
	h      Handler
}

// Registry maps (provider, event type pattern) to a Handler: the innermost
// Router (see Router for the decorators that wrap it). Patterns are the
// project's one syntax (provider.CheckEventPattern): an exact event type,
// or a prefix with a trailing "*" ("release.*"; Wildcard "*" alone takes
// every event of the provider). It is safe for concurrent use.
type Registry struct {
	mu       sync.RWMutex
	handlers map[route]Handler
	// prefixes holds each provider's "*" patterns, longest prefix first.
	prefixes map[string][]prefixRoute
}

// NewRegistry returns an empty Registry.
func NewRegistry() *Registry {
	return &Registry{handlers: make(map[route]Handler), prefixes: make(map[string][]prefixRoute)}
}

// Register routes the provider's events that match pattern to h. A later
// Register of the same pair replaces the earlier handler, so built-ins can
// be overridden. It panics on an empty provider, a pattern
// provider.CheckEventPattern refuses or a nil handler, which are
// programming errors.
func (r *Registry) Register(providerName, pattern string, h Handler) {
	if providerName == "" || h == nil {
		panic("handlers: Register needs a provider, an event type and a handler")
	}
	if err := provider.CheckEventPattern(pattern); err != nil {
		panic("handlers: Register: " + err.Error())
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	prefix, ok := strings.CutSuffix(pattern, "*")
	if !ok {
		r.handlers[route{providerName, pattern}] = h
		return
	}
	routes := slices.DeleteFunc(r.prefixes[providerName], func(p prefixRoute) bool { return p.prefix == prefix })
	routes = append(routes, prefixRoute{prefix: prefix, h: h})
	slices.SortFunc(routes, func(a, b prefixRoute) int { return len(b.prefix) - len(a.prefix) })
	r.prefixes[providerName] = routes
}

// Lookup returns the handler for the provider's eventType: the exact route
// if there is one, else the matching pattern with the longest prefix (the
// provider's Wildcard last). false means no handler, and the envelope is to
// be ignored.
func (r *Registry) Lookup(providerName, eventType string) (Handler, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if h, ok := r.handlers[route{providerName, eventType}]; ok {
		return h, true
	}
	for _, p := range r.prefixes[providerName] {
		if strings.HasPrefix(eventType, p.prefix) {
			return p.h, true
		}
	}
	return nil, false
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
