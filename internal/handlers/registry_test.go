package handlers_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inboxhq/inbox/internal/envelope"
	"github.com/inboxhq/inbox/internal/handlers"
)

func named(name string) handlers.Handler {
	return handlers.HandlerFunc(func(context.Context, pgx.Tx, *envelope.Envelope) (json.RawMessage, error) {
		return json.RawMessage(fmt.Sprintf("%q", name)), nil
	})
}

func TestRegistryLookup(t *testing.T) {
	t.Parallel()
	r := handlers.NewRegistry()
	r.Register("acme", "order.paid", named("exact"))
	r.Register("acme", "*", named("wildcard"))
	r.Register("other", "order.paid", named("other"))

	for _, tt := range []struct {
		provider, event string
		want            string // "" for no handler
	}{
		{"acme", "order.paid", "exact"},
		{"acme", "order.refunded", "wildcard"},
		{"acme", "", "wildcard"},
		{"other", "order.paid", "other"},
		{"other", "order.refunded", ""},
		{"nobody", "order.paid", ""},
	} {
		h, ok := r.Lookup(tt.provider, tt.event)
		if tt.want == "" {
			if ok {
				t.Errorf("Lookup(%s, %s) found a handler, want none", tt.provider, tt.event)
			}
			continue
		}
		if !ok {
			t.Errorf("Lookup(%s, %s) found none, want %s", tt.provider, tt.event, tt.want)
			continue
		}
		got, err := h.Handle(context.Background(), nil, &envelope.Envelope{})
		if err != nil || string(got) != fmt.Sprintf("%q", tt.want) {
			t.Errorf("Lookup(%s, %s) = %s, want %s", tt.provider, tt.event, got, tt.want)
		}
	}

	// A later registration replaces an earlier one.
	r.Register("acme", "order.paid", named("replaced"))
	h, _ := r.Lookup("acme", "order.paid")
	if got, _ := h.Handle(context.Background(), nil, nil); string(got) != `"replaced"` {
		t.Errorf("after re-Register, handler = %s, want replaced", got)
	}

	defer func() {
		if recover() == nil {
			t.Error("Register with a nil handler did not panic")
		}
	}()
	r.Register("acme", "x", nil)
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
		if _, ok := r.Lookup(route[0], route[1]); !ok {
			t.Errorf("Builtin has no handler for %s %s", route[0], route[1])
		}
	}
	for _, route := range [][2]string{{"stripe", "customer.created"}, {"shopify", "orders/create"}, {"standard", "payment.failed"}} {
		if _, ok := r.Lookup(route[0], route[1]); ok {
			t.Errorf("Builtin handles %s %s, want it ignored", route[0], route[1])
		}
	}
	// Each call is a fresh registry: extending one leaves the others alone.
	r.Register("stripe", "customer.created", named("x"))
	if _, ok := handlers.Builtin().Lookup("stripe", "customer.created"); ok {
		t.Error("Register on one Builtin registry changed another")
	}
}

func TestErrorClassification(t *testing.T) {
	t.Parallel()
	cause := errors.New("cause")
	if handlers.Permanent(nil) != nil || handlers.NotReady(nil) != nil || handlers.RetryAfter(nil, time.Second) != nil {
		t.Fatal("wrapping nil must give nil")
	}

	p := handlers.Permanent(fmt.Errorf("context: %w", cause))
	var pe *handlers.PermanentError
	if !errors.As(p, &pe) || !errors.Is(p, cause) || p.Error() != "context: cause" {
		t.Fatalf("Permanent = %#v (%v)", p, p)
	}

	n := handlers.NotReady(cause)
	var ne *handlers.NotReadyError
	if !errors.As(n, &ne) || ne.Wait != 0 || !errors.Is(n, cause) || n.Error() != "cause" {
		t.Fatalf("NotReady = %#v", n)
	}

	r := handlers.RetryAfter(cause, 30*time.Second)
	var re *handlers.RetryAfterError
	if !errors.As(r, &re) || re.After != 30*time.Second || !errors.Is(r, cause) {
		t.Fatalf("RetryAfter = %#v", r)
	}

	// An error keeps the first classification it was given.
	if got := handlers.Permanent(n); got != n {
		t.Fatalf("Permanent(NotReady(err)) = %#v, want the NotReadyError unchanged", got)
	}
	if got := handlers.NotReady(fmt.Errorf("more context: %w", p)); !errors.As(got, &pe) || errors.As(got, &ne) {
		t.Fatalf("NotReady(wrapped Permanent) = %#v, want it still permanent only", got)
	}
}
