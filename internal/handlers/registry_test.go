package handlers_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/inboxhq/inbox/internal/envelope"
	"github.com/inboxhq/inbox/internal/handlers"
	"github.com/inboxhq/inbox/internal/labels"
)

func named(name string) handlers.Handler {
	return handlers.HandlerFunc(func(context.Context, handlers.Run) (json.RawMessage, error) {
		return json.RawMessage(fmt.Sprintf("%q", name)), nil
	})
}

func TestRegistryLookup(t *testing.T) {
	t.Parallel()
	r := handlers.NewRegistry()
	r.Register("acme", "order.paid", named("exact"))
	r.Register("acme", "*", named("wildcard"))
	r.Register("acme", "order.refund.*", named("refunds"))
	r.Register("acme", "order.*", named("orders"))
	r.Register("other", "order.paid", named("other"))

	for _, tt := range []struct {
		provider, event string
		want            string // "" for no handler
	}{
		{"acme", "order.paid", "exact"},
		{"acme", "order.refunded", "orders"},
		{"acme", "order.refund.failed", "refunds"}, // the longest prefix wins, whatever the order registered
		{"acme", "order", "wildcard"},              // "order.*" needs the dot
		{"acme", "invoice.paid", "wildcard"},
		{"acme", "", "wildcard"},
		{"other", "order.paid", "other"},
		{"other", "order.refunded", ""},
		{"nobody", "order.paid", ""},
	} {
		h, ok := r.Lookup(tt.provider, tt.event)
		if tt.want == "" {
			assert.False(t, ok, "Lookup(%s, %s) found a handler, want none", tt.provider, tt.event)
			continue
		}
		if !assert.True(t, ok, "Lookup(%s, %s) found none, want %s", tt.provider, tt.event, tt.want) {
			continue
		}
		got, err := h.Handle(context.Background(), handlers.Run{Envelope: &envelope.Envelope{}})
		if assert.NoError(t, err) {
			assert.Equal(t, fmt.Sprintf("%q", tt.want), string(got), "Lookup(%s, %s)", tt.provider, tt.event)
		}
	}

	// A later registration replaces an earlier one.
	r.Register("acme", "order.paid", named("replaced"))
	h, _ := r.Lookup("acme", "order.paid")
	got, _ := h.Handle(context.Background(), handlers.Run{})
	assert.Equal(t, `"replaced"`, string(got), "after re-Register")

	// So does a later registration of the same pattern.
	r.Register("acme", "order.*", named("orders, replaced"))
	h, _ = r.Lookup("acme", "order.shipped")
	got, _ = h.Handle(context.Background(), handlers.Run{})
	assert.Equal(t, `"orders, replaced"`, string(got), "after re-Register of a pattern")

	assert.Panics(t, func() { r.Register("acme", "x", nil) }, "Register with a nil handler")
	assert.Panics(t, func() { r.Register("acme", "*.paid", named("x")) }, "Register with '*' not at the end")
	assert.Panics(t, func() { r.Register("acme", "", named("x")) }, "Register with an empty pattern")
}

func TestBuiltinRoutes(t *testing.T) {
	t.Parallel()
	r := handlers.Builtin()
	for _, route := range [][2]string{
		{"stripe", "payment_intent.succeeded"}, {"stripe", "charge.refunded"},
		{"standard", "payment.succeeded"}, {"standard", "payment.refunded"},
		{"shopify", "orders/paid"}, {"shopify", "refunds/create"},
		{"github", "push"}, {"github", "pull_request.opened"},
	} {
		_, ok := r.Lookup(route[0], route[1])
		assert.True(t, ok, "Builtin has no handler for %s %s", route[0], route[1])
	}
	for _, route := range [][2]string{{"stripe", "customer.created"}, {"shopify", "orders/create"}, {"standard", "payment.failed"}} {
		_, ok := r.Lookup(route[0], route[1])
		assert.False(t, ok, "Builtin handles %s %s, want it ignored", route[0], route[1])
	}
	// Each call is a fresh registry: extending one leaves the others alone.
	r.Register("stripe", "customer.created", named("x"))
	_, ok := handlers.Builtin().Lookup("stripe", "customer.created")
	assert.False(t, ok, "Register on one Builtin registry changed another")
}

func TestErrorClassification(t *testing.T) {
	t.Parallel()
	cause := errors.New("cause")
	require.NoError(t, handlers.Permanent(nil), "wrapping nil must give nil")
	require.NoError(t, handlers.NotReady(nil), "wrapping nil must give nil")
	require.NoError(t, handlers.RetryAfter(nil, time.Second), "wrapping nil must give nil")

	p := handlers.Permanent(fmt.Errorf("context: %w", cause))
	var pe *handlers.PermanentError
	require.ErrorAs(t, p, &pe)
	require.ErrorIs(t, p, cause)
	require.EqualError(t, p, "context: cause")

	n := handlers.NotReady(cause)
	var ne *handlers.NotReadyError
	require.ErrorAs(t, n, &ne)
	require.Zero(t, ne.Wait, "NotReady = %#v", n)
	require.ErrorIs(t, n, cause)
	require.EqualError(t, n, "cause")

	r := handlers.RetryAfter(cause, 30*time.Second)
	var re *handlers.RetryAfterError
	require.ErrorAs(t, r, &re)
	require.Equal(t, 30*time.Second, re.After, "RetryAfter = %#v", r)
	require.ErrorIs(t, r, cause)

	// An error keeps the first classification it was given.
	require.Same(t, n, handlers.Permanent(n), "Permanent(NotReady(err)): the NotReadyError unchanged")
	got := handlers.NotReady(fmt.Errorf("more context: %w", p))
	require.ErrorAs(t, got, &pe, "NotReady(wrapped Permanent) is still permanent")
	require.NotErrorAs(t, got, &ne, "NotReady(wrapped Permanent) is permanent only")
}

func TestChainRunsTheFirstMiddlewareOutermost(t *testing.T) {
	t.Parallel()
	var order []string
	mw := func(name string) handlers.Middleware {
		return func(next handlers.Handler) handlers.Handler {
			return handlers.HandlerFunc(func(ctx context.Context, run handlers.Run) (json.RawMessage, error) {
				order = append(order, name+" in")
				res, err := next.Handle(ctx, run)
				order = append(order, name+" out")
				return res, err
			})
		}
	}
	h := handlers.Chain(handlers.HandlerFunc(func(context.Context, handlers.Run) (json.RawMessage, error) {
		order = append(order, "handler")
		return json.RawMessage(`{}`), nil
	}), mw("a"), mw("b"))
	_, err := h.Handle(context.Background(), handlers.Run{})
	require.NoError(t, err)
	require.Equal(t, []string{"a in", "b in", "handler", "b out", "a out"}, order)
	order = nil
	_, err = handlers.Chain(h).Handle(context.Background(), handlers.Run{})
	require.NoError(t, err)
	require.Equal(t, []string{"a in", "b in", "handler", "b out", "a out"}, order, "no more middleware: the same chain")
}

func panicsInHandler(context.Context, handlers.Run) (json.RawMessage, error) {
	var m map[string]int
	m["boom"]++ // a nil map: a runtime panic, as a handler bug would
	return nil, nil
}

func TestRecoverTurnsAPanicIntoAFailureKeepingTheStack(t *testing.T) {
	t.Parallel()
	res, err := handlers.Recover(handlers.HandlerFunc(panicsInHandler)).Handle(context.Background(), handlers.Run{})
	require.Nil(t, res)
	var p *handlers.PanicError
	require.ErrorAs(t, err, &p)
	require.Contains(t, err.Error(), "handler panic: assignment to entry in nil map")
	require.Contains(t, string(p.Stack), "handlers_test.panicsInHandler", "the stack names where it panicked")
	require.Equal(t, labels.CausePanic, handlers.CauseOf(err))
	var permanent *handlers.PermanentError
	require.False(t, errors.As(err, &permanent), "a panic is retried, as a transient error")
}
