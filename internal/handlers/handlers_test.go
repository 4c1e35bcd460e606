package handlers_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/inboxhq/inbox/internal/envelope"
	"github.com/inboxhq/inbox/internal/envelope/envelopetest"
	"github.com/inboxhq/inbox/internal/handlers"
	"github.com/inboxhq/inbox/internal/ledger"
	"github.com/inboxhq/inbox/internal/pgtest"
)

type bundle struct {
	ctx  context.Context
	pool *pgxpool.Pool
	reg  *handlers.Registry
	// ledgerAccounts is the worker's account cache; accounts the sources'
	// account_id, as the worker gives them to each run (Run.Account).
	ledgerAccounts *ledger.Accounts
	accounts       map[string]string
}

func setup(t *testing.T) *bundle {
	t.Helper()
	pool := pgtest.NewPool(t)
	return &bundle{ctx: context.Background(), pool: pool, reg: handlers.Builtin(), ledgerAccounts: ledger.NewAccounts(pool)}
}

var deliveries atomic.Int64 // for ids a test makes up (Shopify webhook ids)

// envelope stores a pending envelope for body and returns it as the worker
// loads it.
func (b *bundle) envelope(t *testing.T, source, provider, eventType string, body []byte, headers map[string]string) *envelope.Envelope {
	t.Helper()
	if body == nil {
		body = []byte{}
	}
	id := envelopetest.Insert(t, b.pool, envelopetest.Row{Source: source, Provider: provider, EventType: eventType, Body: body, Headers: headers})
	env, err := envelope.Get(b.ctx, b.pool, id)
	require.NoError(t, err)
	return env
}

// handle runs env through the registry as the worker does (handlers.Resolve)
// in a transaction that commits only when the handler succeeds, with the
// Run the worker gives an envelope run on its own: its ledger writer posts
// at once through the account cache, and the source's account. The
// deferred batch is the worker's (handlerstest runs handlers with it).
func (b *bundle) handle(t *testing.T, env *envelope.Envelope) (json.RawMessage, error) {
	t.Helper()
	return b.handleWith(t, b.reg, env)
}

func (b *bundle) handleWith(t *testing.T, r handlers.Router, env *envelope.Envelope) (json.RawMessage, error) {
	t.Helper()
	h, ok := handlers.Resolve(r, env)
	require.True(t, ok, "no handler for %s %s", env.Provider, env.EventType)
	var res json.RawMessage
	err := pgx.BeginFunc(b.ctx, b.pool, func(tx pgx.Tx) error {
		var err error
		res, err = h.Handle(b.ctx, handlers.Run{Tx: tx, Envelope: env, Ledger: ledger.NewWriter(tx, b.ledgerAccounts, nil), Account: b.accounts[env.Source]})
		return err
	})
	return res, err
}

func (b *bundle) mustHandle(t *testing.T, env *envelope.Envelope) handlers.PostingResult {
	t.Helper()
	raw, err := b.handle(t, env)
	require.NoError(t, err, "handle %s %s", env.Provider, env.EventType)
	return decodeResult(t, raw)
}

// decodeResult decodes a posting result, refusing fields PostingResult lacks.
func decodeResult(t *testing.T, raw json.RawMessage) handlers.PostingResult {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	var r handlers.PostingResult
	require.NoError(t, dec.Decode(&r), "result %s", raw)
	return r
}

type txRow struct {
	ID, EnvelopeID                       int64
	Kind, Merchant, PaymentKey, Currency string
	AmountMinor                          int64
}

// transaction loads the ledger transaction with the business key.
func (b *bundle) transaction(t *testing.T, key string) txRow {
	t.Helper()
	var r txRow
	err := b.pool.QueryRow(b.ctx, `
		SELECT id, envelope_id, kind, merchant, payment_key, currency, amount_minor
		  FROM ledger_transaction WHERE idempotency_key = $1`, key,
	).Scan(&r.ID, &r.EnvelopeID, &r.Kind, &r.Merchant, &r.PaymentKey, &r.Currency, &r.AmountMinor)
	require.NoError(t, err, "ledger transaction %q", key)
	return r
}

// balances returns merchant's balances as "account currency amount" lines.
func (b *bundle) balances(t *testing.T, merchant string) []string {
	t.Helper()
	bs, err := ledger.Balances(b.ctx, b.pool, merchant)
	require.NoError(t, err)
	var out []string
	for _, bal := range bs {
		out = append(out, fmt.Sprintf("%s %s %d", bal.Account, bal.Currency, bal.BalanceMinor))
	}
	return out
}

func fixture(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	require.NoError(t, err)
	return b
}

// remove, as a value for edit, deletes the field.
var remove = &struct{}{}

// edit returns body with the field at a dotted path set to v (numbers stay
// exact) or removed.
func edit(t *testing.T, body []byte, path string, v any) []byte {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var root map[string]any
	require.NoError(t, dec.Decode(&root))
	m := root
	parts := strings.Split(path, ".")
	for _, p := range parts[:len(parts)-1] {
		next, ok := m[p].(map[string]any)
		require.True(t, ok, "edit: %s is not an object", p)
		m = next
	}
	if v == remove {
		delete(m, parts[len(parts)-1])
	} else {
		m[parts[len(parts)-1]] = v
	}
	out, err := json.Marshal(root)
	require.NoError(t, err)
	return out
}

func raw(s string) json.RawMessage { return json.RawMessage(s) }

func TestStripePaymentIntentSucceeded(t *testing.T) {
	t.Parallel()
	b := setup(t)
	env := b.envelope(t, "stripe", "stripe", "payment_intent.succeeded", fixture(t, "stripe_payment_intent_succeeded.json"), nil)

	res := b.mustHandle(t, env)
	tr := b.transaction(t, "stripe:payment:pi_3PmB2xLkdIwHu7ix0rQXk1aB")
	require.Equal(t, txRow{tr.ID, env.ID, "payment", "stripe", "stripe:payment:pi_3PmB2xLkdIwHu7ix0rQXk1aB", "USD", 1000}, tr, "ledger transaction")
	require.Equal(t, handlers.PostingResult{
		Posted: true, LedgerTransactionID: tr.ID, Kind: "payment", IdempotencyKey: "stripe:payment:pi_3PmB2xLkdIwHu7ix0rQXk1aB",
		Merchant: "stripe", AmountMinor: 1000, Currency: "USD",
	}, res, "result")
	require.Equal(t, "[psp_clearing USD 1000 sales USD -1000]", fmt.Sprint(b.balances(t, "stripe")), "balances")
}

func TestStripeConnectPaymentInJPY(t *testing.T) {
	t.Parallel()
	b := setup(t)
	env := b.envelope(t, "stripe", "stripe", "payment_intent.succeeded", fixture(t, "stripe_payment_intent_succeeded_connect.json"), nil)
	res := b.mustHandle(t, env)
	tr := b.transaction(t, "stripe:payment:pi_3PnK7sQ9RKHgCVdK1kT2pLmN")
	require.Equal(t, txRow{tr.ID, env.ID, "payment", "acct_1Nv0FGQ9RKHgCVdK", "stripe:payment:pi_3PnK7sQ9RKHgCVdK1kT2pLmN", "JPY", 5000}, tr, "ledger transaction")
	require.Equal(t, true, res.Posted, "result.posted")
	require.Equal(t, "acct_1Nv0FGQ9RKHgCVdK", res.Merchant, "result.merchant")
}

func TestStripePartialRefundsPostCumulativeDeltas(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const payKey = "stripe:payment:pi_3PmB2xLkdIwHu7ix0rQXk1aB"
	b.mustHandle(t, b.envelope(t, "stripe", "stripe", "payment_intent.succeeded", fixture(t, "stripe_payment_intent_succeeded.json"), nil))

	refund300 := fixture(t, "stripe_charge_refunded_300.json")
	first := b.envelope(t, "stripe", "stripe", "charge.refunded", refund300, nil)
	res := b.mustHandle(t, first)
	tr := b.transaction(t, "stripe:refund:ch_3PmB2xLkdIwHu7ix0fOHUb1q:300:evt_3PmB2xLkdIwHu7ix0sVv9QwE")
	require.Equal(t, txRow{tr.ID, first.ID, "refund", "stripe", payKey, "USD", 300}, tr, "first refund")
	require.Equal(t, handlers.PostingResult{
		Posted: true, LedgerTransactionID: tr.ID, Kind: "refund", IdempotencyKey: "stripe:refund:ch_3PmB2xLkdIwHu7ix0fOHUb1q:300:evt_3PmB2xLkdIwHu7ix0sVv9QwE",
		Merchant: "stripe", AmountMinor: 300, Currency: "USD",
	}, res, "first result")

	second := b.envelope(t, "stripe", "stripe", "charge.refunded", fixture(t, "stripe_charge_refunded_500.json"), nil)
	res = b.mustHandle(t, second)
	tr = b.transaction(t, "stripe:refund:ch_3PmB2xLkdIwHu7ix0fOHUb1q:500:evt_3PmB2xLkdIwHu7ix0dM4rY2k")
	require.Equal(t, txRow{tr.ID, second.ID, "refund", "stripe", payKey, "USD", 200}, tr, "second refund")
	require.Equal(t, int64(200), res.AmountMinor, "second result amount")

	// The first event again under a new delivery: already covered.
	res = b.mustHandle(t, b.envelope(t, "stripe", "stripe", "charge.refunded", refund300, nil))
	require.Equal(t, handlers.PostingResult{Kind: "refund", Merchant: "stripe", Currency: "USD", Reason: "nothing new refunded"}, res, "late duplicate")

	// The second envelope replayed: reports its own posting.
	res = b.mustHandle(t, second)
	require.Equal(t, handlers.PostingResult{
		LedgerTransactionID: tr.ID, Kind: "refund", IdempotencyKey: "stripe:refund:ch_3PmB2xLkdIwHu7ix0fOHUb1q:500:evt_3PmB2xLkdIwHu7ix0dM4rY2k",
		Merchant: "stripe", AmountMinor: 200, Currency: "USD", Reason: ledger.ReasonEnvelopePosted,
	}, res, "replay")

	require.Equal(t, 3, pgtest.Count(t, b.pool, "SELECT count(*) FROM ledger_transaction"), "ledger transactions")
	require.Equal(t, "[psp_clearing USD 500 refunds USD 500 sales USD -1000]", fmt.Sprint(b.balances(t, "stripe")), "balances")
}

func TestStripeRefundBeforePaymentIsNotReady(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, err := b.handle(t, b.envelope(t, "stripe", "stripe", "charge.refunded", fixture(t, "stripe_charge_refunded_300.json"), nil))
	var nr *handlers.NotReadyError
	require.ErrorAs(t, err, &nr)
	require.ErrorIs(t, err, ledger.ErrPaymentNotPosted)
	require.Zero(t, nr.Wait, "the default wait")
	require.Equal(t, 0, pgtest.Count(t, b.pool, "SELECT count(*) FROM ledger_transaction"), "ledger transactions")
}

func TestStandardPaymentAndRefund(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const payKey = "standard:merch_acme:payment:pay_01J5C7Y8Z9QK3M4N5P6R7S8T9V"
	pay := b.envelope(t, "payments", "standard", "payment.succeeded", fixture(t, "standard_payment_succeeded.json"), nil)
	res := b.mustHandle(t, pay)
	tr := b.transaction(t, payKey)
	require.Equal(t, txRow{tr.ID, pay.ID, "payment", "merch_acme", payKey, "EUR", 12345}, tr, "payment")
	require.Equal(t, handlers.PostingResult{
		Posted: true, LedgerTransactionID: tr.ID, Kind: "payment", IdempotencyKey: payKey, Merchant: "merch_acme", AmountMinor: 12345, Currency: "EUR",
	}, res, "payment result")

	ref := b.envelope(t, "payments", "standard", "payment.refunded", fixture(t, "standard_payment_refunded.json"), nil)
	res = b.mustHandle(t, ref)
	const refKey = "standard:merch_acme:refund:rfd_01J5H2K3L4M5N6P7Q8R9S0T1V2"
	tr = b.transaction(t, refKey)
	require.Equal(t, txRow{tr.ID, ref.ID, "refund", "merch_acme", payKey, "EUR", 2345}, tr, "refund")
	require.Equal(t, handlers.PostingResult{
		Posted: true, LedgerTransactionID: tr.ID, Kind: "refund", IdempotencyKey: refKey, Merchant: "merch_acme", AmountMinor: 2345, Currency: "EUR",
	}, res, "refund result")
	require.Equal(t, "[psp_clearing EUR 10000 refunds EUR 2345 sales EUR -12345]", fmt.Sprint(b.balances(t, "merch_acme")), "balances")
}

func TestStandardMerchantDefaultsToSource(t *testing.T) {
	t.Parallel()
	b := setup(t)
	body := edit(t, fixture(t, "standard_payment_succeeded.json"), "data.merchant_id", remove)
	res := b.mustHandle(t, b.envelope(t, "payments", "standard", "payment.succeeded", body, nil))
	require.Equal(t, "payments", res.Merchant, "merchant")
	require.Equal(t, "standard:payments:payment:pay_01J5C7Y8Z9QK3M4N5P6R7S8T9V", res.IdempotencyKey, "key")
	b.transaction(t, res.IdempotencyKey)

	// A source with an account_id: the account, by the one merchant rule
	// (the payload's merchant, else the source's account, else its name).
	b.accounts = map[string]string{"payments-eu": "acct_eu"}
	res = b.mustHandle(t, b.envelope(t, "payments-eu", "standard", "payment.succeeded", body, nil))
	require.Equal(t, "acct_eu", res.Merchant, "merchant of a source with an account")
	require.Equal(t, "standard:acct_eu:payment:pay_01J5C7Y8Z9QK3M4N5P6R7S8T9V", res.IdempotencyKey, "key")
}

func TestSamePaymentUnderTwoEnvelopesPostsOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, tt := range []struct{ source, provider, event, file string }{
		{"payments", "standard", "payment.succeeded", "standard_payment_succeeded.json"},
		{"stripe", "stripe", "payment_intent.succeeded", "stripe_payment_intent_succeeded.json"},
		{"shop", "shopify", "orders/paid", "shopify_orders_paid.json"},
	} {
		body := fixture(t, tt.file)
		first := b.mustHandle(t, b.envelope(t, tt.source, tt.provider, tt.event, body, nil))
		firstEnv := b.transaction(t, first.IdempotencyKey).EnvelopeID
		second := b.mustHandle(t, b.envelope(t, tt.source, tt.provider, tt.event, body, nil))
		want := first
		want.Posted = false
		want.Reason = fmt.Sprintf("business key already posted by envelope %d", firstEnv)
		require.Equal(t, want, second, tt.provider+" second result")
	}
	require.Equal(t, 3, pgtest.Count(t, b.pool, "SELECT count(*) FROM ledger_transaction"), "ledger transactions")
}

func TestShopifyOrderPaidAndRefund(t *testing.T) {
	t.Parallel()
	b := setup(t)
	headers := map[string]string{"X-Shopify-Shop-Domain": "jsmith.myshopify.com", "X-Shopify-Topic": "orders/paid"}
	// The order id exceeds 2^53: decoding it as a float would change the key.
	const orderKey = "shopify:order:820982911946154508"
	order := b.envelope(t, "shop", "shopify", "orders/paid", fixture(t, "shopify_orders_paid.json"), headers)
	res := b.mustHandle(t, order)
	tr := b.transaction(t, orderKey)
	require.Equal(t, txRow{tr.ID, order.ID, "payment", "jsmith.myshopify.com", orderKey, "USD", 19965}, tr, "payment")
	require.Equal(t, handlers.PostingResult{
		Posted: true, LedgerTransactionID: tr.ID, Kind: "payment", IdempotencyKey: orderKey, Merchant: "jsmith.myshopify.com", AmountMinor: 19965, Currency: "USD",
	}, res, "payment result")

	// Header names as a proxy might have lowercased them.
	refund := b.envelope(t, "shop", "shopify", "refunds/create", fixture(t, "shopify_refunds_create.json"),
		map[string]string{"x-shopify-shop-domain": "jsmith.myshopify.com"})
	res = b.mustHandle(t, refund)
	const refundKey = "shopify:refund:929361462"
	tr = b.transaction(t, refundKey)
	// 41.94 + 10.00 succeeded; the failed 5.00 is not money moved.
	require.Equal(t, txRow{tr.ID, refund.ID, "refund", "jsmith.myshopify.com", orderKey, "USD", 5194}, tr, "refund")
	require.Equal(t, true, res.Posted, "refund result.posted")
	require.Equal(t, "[psp_clearing USD 14771 refunds USD 5194 sales USD -19965]", fmt.Sprint(b.balances(t, "jsmith.myshopify.com")), "balances")
}

func TestShopifyFallbacks(t *testing.T) {
	t.Parallel()
	b := setup(t)
	body := fixture(t, "shopify_orders_paid.json")
	body = edit(t, body, "currency", remove)
	body = edit(t, body, "presentment_currency", "JPY")
	body = edit(t, body, "total_price", "1500")
	res := b.mustHandle(t, b.envelope(t, "shop", "shopify", "orders/paid", body, nil))
	require.Equal(t, handlers.PostingResult{
		Posted: true, LedgerTransactionID: res.LedgerTransactionID, Kind: "payment", IdempotencyKey: "shopify:order:820982911946154508",
		Merchant: "shop", AmountMinor: 1500, Currency: "JPY",
	}, res, "result")
}

// Shopify signs the body only, not X-Shopify-Shop-Domain: a signed body
// replayed under a new webhook id with another shop header must not post the
// order (or its refund) a second time.
func TestShopifyReplayUnderAnotherShopPostsOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	shop := func(domain string) map[string]string {
		return map[string]string{"X-Shopify-Shop-Domain": domain, "X-Shopify-Webhook-Id": fmt.Sprintf("wh_%d", deliveries.Add(1))}
	}
	for _, tt := range []struct{ event, file string }{
		{"orders/paid", "shopify_orders_paid.json"},
		{"refunds/create", "shopify_refunds_create.json"},
	} {
		body := fixture(t, tt.file)
		first := b.mustHandle(t, b.envelope(t, "shop", "shopify", tt.event, body, shop("jsmith.myshopify.com")))
		require.Equal(t, true, first.Posted, tt.event+" first posted")

		raw, err := b.handle(t, b.envelope(t, "shop", "shopify", tt.event, body, shop("other.myshopify.com")))
		// ledger.Post finds the key posted for another merchant: a permanent
		// error; a no-op would do too. Never a second posting.
		var pe *handlers.PermanentError
		switch {
		case errors.As(err, &pe):
		case err == nil:
			if res := decodeResult(t, raw); res.Posted {
				t.Fatalf("%s replayed under another shop: posted again: %+v", tt.event, res)
			}
		default:
			t.Fatalf("%s replayed under another shop: %v, want a permanent error or a no-op", tt.event, err)
		}
	}
	require.Equal(t, 2, pgtest.Count(t, b.pool, "SELECT count(*) FROM ledger_transaction"), "ledger transactions")
	require.Equal(t, "[]", fmt.Sprint(b.balances(t, "other.myshopify.com")), "other shop's balances")
}

// A free order (or one paid by gift card) has total_price "0.00": no money
// moved, nothing to post, and no reason to fail.
func TestShopifyZeroTotalIsNoop(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, total := range []string{"0.00", "0"} {
		body := edit(t, fixture(t, "shopify_orders_paid.json"), "total_price", total)
		res := b.mustHandle(t, b.envelope(t, "shop", "shopify", "orders/paid", body, nil))
		require.Equal(t, handlers.PostingResult{Kind: "payment", Merchant: "shop", Currency: "USD", Reason: "zero amount"}, res, "result of total "+total)
	}
	require.Equal(t, 0, pgtest.Count(t, b.pool, "SELECT count(*) FROM ledger_transaction"), "ledger transactions")
}

func TestShopifyRefundWithoutMoneyIsNoop(t *testing.T) {
	t.Parallel()
	b := setup(t)
	body := edit(t, fixture(t, "shopify_refunds_create.json"), "transactions", []any{})
	// No payment posted either: a refund that moves no money needs none.
	res := b.mustHandle(t, b.envelope(t, "shop", "shopify", "refunds/create", body, nil))
	require.Equal(t, handlers.PostingResult{Kind: "refund", Merchant: "shop", Reason: "nothing refunded"}, res, "result")
	require.Equal(t, 0, pgtest.Count(t, b.pool, "SELECT count(*) FROM ledger_transaction"), "ledger transactions")
}

func TestShopifyRefundBeforeOrderIsNotReady(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, err := b.handle(t, b.envelope(t, "shop", "shopify", "refunds/create", fixture(t, "shopify_refunds_create.json"), nil))
	var nr *handlers.NotReadyError
	require.ErrorAs(t, err, &nr)
	require.ErrorIs(t, err, ledger.ErrPaymentNotPosted)
	require.Equal(t, 0, pgtest.Count(t, b.pool, "SELECT count(*) FROM ledger_transaction"), "ledger transactions")
}

func TestGitHubEventsAreRecorded(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, event := range []string{"push", "issues.opened", "ping"} {
		got, err := b.handle(t, b.envelope(t, "gh", "github", event, fixture(t, "github_push.json"), nil))
		require.NoError(t, err)
		require.Equal(t, fmt.Sprintf(`{"recorded":true,"event":%q}`, event), string(got), event+" result")
	}
	require.Equal(t, 0, pgtest.Count(t, b.pool, "SELECT count(*) FROM ledger_transaction"), "ledger transactions")
}

func TestOverRefundIsPermanent(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.mustHandle(t, b.envelope(t, "payments", "standard", "payment.succeeded", fixture(t, "standard_payment_succeeded.json"), nil))
	body := edit(t, fixture(t, "standard_payment_refunded.json"), "data.amount_minor", json.Number("12346"))
	_, err := b.handle(t, b.envelope(t, "payments", "standard", "payment.refunded", body, nil))
	var pe *handlers.PermanentError
	var le *ledger.PostingError
	require.ErrorAs(t, err, &pe)
	require.ErrorAs(t, err, &le)
	require.Contains(t, le.Reason, "over-refund")
	require.Equal(t, 1, pgtest.Count(t, b.pool, "SELECT count(*) FROM ledger_transaction"), "ledger transactions")
}

func TestBadPayloadsArePermanent(t *testing.T) {
	t.Parallel()
	b := setup(t)
	// A posted payment for every provider, so refund cases fail on their own
	// payload and not for want of a payment.
	b.mustHandle(t, b.envelope(t, "stripe", "stripe", "payment_intent.succeeded", fixture(t, "stripe_payment_intent_succeeded.json"), nil))
	b.mustHandle(t, b.envelope(t, "payments", "standard", "payment.succeeded", fixture(t, "standard_payment_succeeded.json"), nil))
	b.mustHandle(t, b.envelope(t, "shop", "shopify", "orders/paid", fixture(t, "shopify_orders_paid.json"), nil))
	before := pgtest.Count(t, b.pool, "SELECT count(*) FROM ledger_transaction")

	stripePay := fixture(t, "stripe_payment_intent_succeeded.json")
	stripeRefund := fixture(t, "stripe_charge_refunded_300.json")
	standardPay := fixture(t, "standard_payment_succeeded.json")
	standardRefund := fixture(t, "standard_payment_refunded.json")
	shopifyOrder := fixture(t, "shopify_orders_paid.json")
	shopifyRefund := fixture(t, "shopify_refunds_create.json")
	mixed := edit(t, shopifyRefund, "transactions", []any{
		map[string]any{"kind": "refund", "status": "success", "amount": "1.00", "currency": "USD"},
		map[string]any{"kind": "refund", "status": "success", "amount": "1.00", "currency": "EUR"},
	})

	for _, tt := range []struct {
		name, source, provider, event string
		body                          []byte
		is                            error // also required, when set
	}{
		{"not JSON", "stripe", "stripe", "payment_intent.succeeded", []byte("amount=1000&currency=usd"), nil},
		{"empty body", "stripe", "stripe", "payment_intent.succeeded", []byte{}, nil},
		{"JSON array", "stripe", "stripe", "payment_intent.succeeded", []byte(`[1,2]`), nil},
		{"stripe no data.object", "stripe", "stripe", "payment_intent.succeeded", edit(t, stripePay, "data.object", remove), nil},
		{"stripe wrong object", "stripe", "stripe", "payment_intent.succeeded", edit(t, stripePay, "data.object.object", "charge"), nil},
		{"stripe no id", "stripe", "stripe", "payment_intent.succeeded", edit(t, stripePay, "data.object.id", remove), nil},
		{"stripe no amount_received", "stripe", "stripe", "payment_intent.succeeded", edit(t, stripePay, "data.object.amount_received", remove), nil},
		{"stripe fractional amount", "stripe", "stripe", "payment_intent.succeeded", edit(t, stripePay, "data.object.amount_received", json.Number("10.5")), nil},
		{"stripe amount as string", "stripe", "stripe", "payment_intent.succeeded", edit(t, stripePay, "data.object.amount_received", "1000"), nil},
		{"stripe zero amount", "stripe", "stripe", "payment_intent.succeeded", edit(t, stripePay, "data.object.amount_received", json.Number("0")), ledger.ErrInvalidAmount},
		{"stripe negative amount", "stripe", "stripe", "payment_intent.succeeded", edit(t, stripePay, "data.object.amount_received", json.Number("-5")), ledger.ErrInvalidAmount},
		{"stripe no currency", "stripe", "stripe", "payment_intent.succeeded", edit(t, stripePay, "data.object.currency", remove), nil},
		{"stripe refund no payment_intent", "stripe", "stripe", "charge.refunded", edit(t, stripeRefund, "data.object.payment_intent", nil), nil},
		{"stripe refund no amount_refunded", "stripe", "stripe", "charge.refunded", edit(t, stripeRefund, "data.object.amount_refunded", remove), nil},
		{"stripe refund other currency", "stripe", "stripe", "charge.refunded", edit(t, stripeRefund, "data.object.currency", "eur"), nil},
		{"standard no data", "payments", "standard", "payment.succeeded", edit(t, standardPay, "data", remove), nil},
		{"standard no payment_id", "payments", "standard", "payment.succeeded", edit(t, standardPay, "data.payment_id", remove), nil},
		{"standard fractional amount", "payments", "standard", "payment.succeeded", edit(t, standardPay, "data.amount_minor", json.Number("123.45")), nil},
		{"standard exponent amount", "payments", "standard", "payment.succeeded", edit(t, standardPay, "data.amount_minor", json.Number("1e3")), nil},
		{"standard amount as string", "payments", "standard", "payment.succeeded", edit(t, standardPay, "data.amount_minor", "12345"), nil},
		{"standard amount overflow", "payments", "standard", "payment.succeeded", edit(t, standardPay, "data.amount_minor", json.Number("9223372036854775808")), nil},
		{"standard no currency", "payments", "standard", "payment.succeeded", edit(t, standardPay, "data.currency", remove), nil},
		{"standard refund no refund_id", "payments", "standard", "payment.refunded", edit(t, standardRefund, "data.refund_id", remove), nil},
		{"shopify no id", "shop", "shopify", "orders/paid", edit(t, shopifyOrder, "id", remove), nil},
		{"shopify id as string", "shop", "shopify", "orders/paid", edit(t, shopifyOrder, "id", "820982911946154508"), nil},
		{"shopify price as number", "shop", "shopify", "orders/paid", edit(t, shopifyOrder, "total_price", json.Number("199.65")), nil},
		{"shopify price not decimal", "shop", "shopify", "orders/paid", edit(t, shopifyOrder, "total_price", "199,65"), ledger.ErrInvalidAmount},
		{"shopify price too precise", "shop", "shopify", "orders/paid", edit(t, shopifyOrder, "total_price", "199.655"), ledger.ErrInvalidAmount},
		{"shopify no total_price", "shop", "shopify", "orders/paid", edit(t, shopifyOrder, "total_price", remove), nil},
		{"shopify refund no order_id", "shop", "shopify", "refunds/create", edit(t, shopifyRefund, "order_id", remove), nil},
		{"shopify refund mixed currencies", "shop", "shopify", "refunds/create", mixed, nil},
	} {
		env := b.envelope(t, tt.source, tt.provider, tt.event, tt.body, nil)
		res, err := b.handle(t, env)
		var pe *handlers.PermanentError
		if !assert.ErrorAs(t, err, &pe, "%s: handle = %s", tt.name, res) {
			continue
		}
		if tt.is != nil {
			assert.ErrorIs(t, err, tt.is, tt.name)
		}
	}
	require.Equal(t, before, pgtest.Count(t, b.pool, "SELECT count(*) FROM ledger_transaction"), "ledger transactions")
}

func TestUnknownCurrencyIsPermanent(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, tt := range []struct {
		source, provider, event string
		body                    []byte
	}{
		{"stripe", "stripe", "payment_intent.succeeded", edit(t, fixture(t, "stripe_payment_intent_succeeded.json"), "data.object.currency", "xyz")},
		{"payments", "standard", "payment.succeeded", edit(t, fixture(t, "standard_payment_succeeded.json"), "data.currency", "XYZ")},
		{"payments", "standard", "payment.succeeded", edit(t, fixture(t, "standard_payment_succeeded.json"), "data.currency", "€")},
		{"shop", "shopify", "orders/paid", edit(t, fixture(t, "shopify_orders_paid.json"), "currency", "ABC")},
	} {
		_, err := b.handle(t, b.envelope(t, tt.source, tt.provider, tt.event, tt.body, nil))
		var pe *handlers.PermanentError
		if assert.ErrorAs(t, err, &pe, "%s %s", tt.provider, tt.event) {
			assert.ErrorIs(t, err, ledger.ErrUnknownCurrency, "%s %s", tt.provider, tt.event)
		}
	}
	require.Equal(t, 0, pgtest.Count(t, b.pool, "SELECT count(*) FROM ledger_transaction"), "ledger transactions")
}
