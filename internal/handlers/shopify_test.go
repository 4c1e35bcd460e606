package handlers_test

import (
	"context"
	"encoding/json"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/inboxhq/inbox/internal/envelope"
	"github.com/inboxhq/inbox/internal/handlers"
	"github.com/inboxhq/inbox/internal/webhooktest"
)

// run handles env through reg's envelope routing and returns the raw result.
func (b *bundle) run(t *testing.T, reg *handlers.Registry, env *envelope.Envelope) json.RawMessage {
	t.Helper()
	h, ok := reg.LookupEnvelope(env)
	if !ok {
		t.Fatalf("no handler for %s %s", env.Provider, env.EventType)
	}
	var raw json.RawMessage
	if err := pgx.BeginFunc(b.ctx, b.pool, func(tx pgx.Tx) error {
		var err error
		raw, err = h.Handle(b.ctx, tx, env)
		return err
	}); err != nil {
		t.Fatalf("handle: %v", err)
	}
	return raw
}

// Shopify may deliver one event under two X-Shopify-Webhook-Ids (same
// X-Shopify-Event-Id): both envelopes are kept, the event is processed once
// (posting and forwarding), and the second names the first.
func TestShopifyEventUnderTwoWebhookIDsIsProcessedOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	reg := handlers.Builtin()
	var forwarded atomic.Int64
	reg.RegisterSource("shopify", nil, handlers.Besides, handlers.HandlerFunc(
		func(context.Context, pgx.Tx, *envelope.Envelope) (json.RawMessage, error) {
			forwarded.Add(1)
			return json.RawMessage(`{"forwarded":true}`), nil
		}))
	body := webhooktest.ShopifyOrderPaid(820982911946154508, "199.00", "USD")
	hdr := func(webhookID string) map[string]string {
		return map[string]string{"X-Shopify-Webhook-Id": webhookID, "X-Shopify-Event-Id": "ev-98880550-4b24",
			"X-Shopify-Shop-Domain": "demo.myshopify.com", "X-Shopify-Topic": "orders/paid"}
	}
	first := b.envelope(t, "shopify", "shopify", "orders/paid", body, hdr("wh-1"))
	second := b.envelope(t, "shopify", "shopify", "orders/paid", body, hdr("wh-2"))
	other := b.envelope(t, "shopify", "shopify", "orders/paid", webhooktest.ShopifyOrderPaid(2, "5.00", "USD"),
		map[string]string{"X-Shopify-Event-Id": "ev-other", "X-Shopify-Shop-Domain": "demo.myshopify.com"})

	// The second is processed first: it still defers to the first.
	var dup handlers.DuplicateResult
	if err := json.Unmarshal(b.run(t, reg, second), &dup); err != nil {
		t.Fatal(err)
	}
	equal(t, "duplicate", dup, handlers.DuplicateResult{DuplicateOf: first.ID,
		Reason: "same X-Shopify-Event-Id as envelope " + itoa(first.ID) + ": the event is processed once"})
	equal(t, "forwarded by the duplicate", forwarded.Load(), int64(0))
	equal(t, "postings by the duplicate", b.count(t, "ledger_transaction"), 0)

	b.run(t, reg, first)
	b.run(t, reg, other)
	equal(t, "forwarded", forwarded.Load(), int64(2))
	equal(t, "postings", b.count(t, "ledger_transaction"), 2)
	equal(t, "envelopes kept", b.count(t, "envelope"), 3)
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
