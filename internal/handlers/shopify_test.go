package handlers_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/inboxhq/inbox/internal/envelope"
	"github.com/inboxhq/inbox/internal/forward"
	"github.com/inboxhq/inbox/internal/handlers"
	"github.com/inboxhq/inbox/internal/pgtest"
	"github.com/inboxhq/inbox/internal/webhooktest"
)

// run handles env through r as the worker does and returns the raw result.
func (b *bundle) run(t *testing.T, r handlers.Router, env *envelope.Envelope) json.RawMessage {
	t.Helper()
	raw, err := b.handleWith(t, r, env)
	require.NoError(t, err, "handle")
	return raw
}

// Shopify may deliver one event under two X-Shopify-Webhook-Ids (same
// X-Shopify-Event-Id): both envelopes are kept, the event is processed once
// (posting and forwarding), and the second names the first.
func TestShopifyEventUnderTwoWebhookIDsIsProcessedOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	reg := forward.New(handlers.Builtin())
	var forwarded atomic.Int64
	reg.Add("shopify", nil, forward.Besides, handlers.HandlerFunc(
		func(context.Context, handlers.Run) (json.RawMessage, error) {
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
	require.NoError(t, json.Unmarshal(b.run(t, reg, second), &dup))
	require.Equal(t, handlers.DuplicateResult{DuplicateOf: first.ID,
		Reason: "same X-Shopify-Event-Id as envelope " + itoa(first.ID) + ": the event is processed once"}, dup, "duplicate")
	require.Equal(t, int64(0), forwarded.Load(), "forwarded by the duplicate")
	require.Equal(t, 0, pgtest.Count(t, b.pool, "SELECT count(*) FROM ledger_transaction"), "postings by the duplicate")

	b.run(t, reg, first)
	b.run(t, reg, other)
	require.Equal(t, int64(2), forwarded.Load(), "forwarded")
	require.Equal(t, 2, pgtest.Count(t, b.pool, "SELECT count(*) FROM ledger_transaction"), "postings")
	require.Equal(t, 3, pgtest.Count(t, b.pool, "SELECT count(*) FROM envelope"), "envelopes kept")
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// An order a USD shop presented in EUR: the payment posts in USD and records
// the EUR; its refunds, which Shopify states in EUR (the refund
// transactions' currency), post in USD at the order's rate, and refunds that
// add up to the order add up to the payment to the cent.
func TestShopifyPresentmentCurrencyRefundsPostInThePaymentsCurrency(t *testing.T) {
	t.Parallel()
	b := setup(t)
	shop := map[string]string{"X-Shopify-Shop-Domain": "eu-shop.myshopify.com"}
	order := []byte(`{"id":5001,"name":"#5001","currency":"USD","presentment_currency":"EUR","total_price":"110.00",
		"total_price_set":{"shop_money":{"amount":"110.00","currency_code":"USD"},"presentment_money":{"amount":"100.00","currency_code":"EUR"}}}`)
	res := b.mustHandle(t, b.envelope(t, "shopify", "shopify", "orders/paid", order, shop))
	require.Equal(t, [2]any{int64(11000), "USD"}, [2]any{res.AmountMinor, res.Currency}, "payment")

	refund := func(id int64, eur string) []byte {
		return fmt.Appendf(nil, `{"id":%d,"order_id":5001,"transactions":[{"id":%d,"kind":"refund","status":"success","amount":%q,"currency":"EUR"}]}`, id, id+1, eur)
	}
	for _, c := range []struct {
		id   int64
		eur  string
		want int64 // USD cents
	}{
		{601, "50.00", 5500},
		{602, "33.33", 3666}, // 83.33 EUR in all = 91.663 USD -> 91.66, less 55.00
		{603, "16.67", 1834}, // the rest: 100.00 EUR = 110.00 USD exactly
	} {
		res := b.mustHandle(t, b.envelope(t, "shopify", "shopify", "refunds/create", refund(c.id, c.eur), shop))
		require.Equal(t, [3]any{true, c.want, "USD"}, [3]any{res.Posted, res.AmountMinor, res.Currency}, fmt.Sprintf("refund %d", c.id))
	}
	require.Equal(t, "[psp_clearing USD 0 refunds USD 11000 sales USD -11000]", fmt.Sprint(b.balances(t, "eu-shop.myshopify.com")), "balances")
	var eur int64
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT sum(p.amount_minor) FROM ledger_presentment p JOIN ledger_transaction t ON t.id = p.transaction_id WHERE t.kind = 'refund'`).Scan(&eur))
	require.Equal(t, int64(10000), eur, "presentment refunded")

	// One cent more is an over-refund, in the presentment currency.
	_, err := b.handle(t, b.envelope(t, "shopify", "shopify", "refunds/create", refund(604, "0.01"), shop))
	var pe *handlers.PermanentError
	require.ErrorAs(t, err, &pe, "refund past the order")
	require.ErrorContains(t, err, "over-refund", "refund past the order")
}

// Shopify Payments refunds are "pending" when refunds/create is sent
// ("Refund submitted and processing"): they count; failed ones do not.
func TestShopifyPendingRefundTransactionsCount(t *testing.T) {
	t.Parallel()
	b := setup(t)
	shop := map[string]string{"X-Shopify-Shop-Domain": "demo.myshopify.com"}
	b.mustHandle(t, b.envelope(t, "shopify", "shopify", "orders/paid", webhooktest.ShopifyOrderPaid(7001, "100.00", "USD"), shop))
	refund := []byte(`{"id":7101,"order_id":7001,"transactions":[
		{"id":1,"kind":"refund","gateway":"shopify_payments","status":"pending","amount":"30.00","currency":"USD"},
		{"id":2,"kind":"refund","status":"failure","amount":"50.00","currency":"USD"},
		{"id":3,"kind":"refund","status":"success","amount":"5.00","currency":"USD"}]}`)
	res := b.mustHandle(t, b.envelope(t, "shopify", "shopify", "refunds/create", refund, shop))
	require.Equal(t, [2]any{true, int64(3500)}, [2]any{res.Posted, res.AmountMinor}, "refunded")
}
