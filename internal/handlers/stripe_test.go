package handlers_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/inboxhq/inbox/internal/handlers"
	"github.com/inboxhq/inbox/internal/ledger"
	"github.com/inboxhq/inbox/internal/pgtest"
	"github.com/inboxhq/inbox/internal/webhooktest"
)

// The payloads below follow Stripe's documented shapes: a PaymentIntent
// (amount, amount_received), a Charge (amount, amount_captured,
// amount_refunded, captured, payment_intent) and a Refund (amount, charge,
// payment_intent, status). Before API version 2025-03-31.basil a partial
// capture creates a Refund for the uncaptured amount and counts it in the
// charge's amount_refunded; from basil on it does neither
// (docs.stripe.com/changelog/basil/2025-03-31/remove-refund-from-partial-capture-and-payment-cancellation-flow).

const (
	preBasil = "2024-06-20"
	basil    = "2025-03-31.basil"
)

func stripeEventAt(id, typ, apiVersion, object string) []byte {
	return fmt.Appendf(nil, `{"id":%q,"object":"event","api_version":%q,"created":1700000000,"livemode":false,"type":%q,"data":{"object":%s}}`, id, apiVersion, typ, object)
}

// stripePI is a payment_intent.succeeded for amount authorized and
// received captured.
func stripePI(evt, pi, apiVersion string, amount, received int64) []byte {
	return stripeEventAt(evt, "payment_intent.succeeded", apiVersion, fmt.Sprintf(
		`{"id":%q,"object":"payment_intent","amount":%d,"amount_capturable":0,"amount_received":%d,"currency":"usd","status":"succeeded","capture_method":"manual"}`,
		pi, amount, received))
}

// stripeCharge is a charge.refunded (or charge.captured) charge.
func stripeCharge(evt, typ, apiVersion, ch, pi string, amount, captured, refunded int64, isCaptured bool) []byte {
	return stripeEventAt(evt, typ, apiVersion, fmt.Sprintf(
		`{"id":%q,"object":"charge","amount":%d,"amount_captured":%d,"amount_refunded":%d,"captured":%t,"currency":"usd","payment_intent":%q,"refunded":%t,"status":"succeeded"}`,
		ch, amount, captured, refunded, isCaptured, pi, refunded == amount))
}

// stripeRefundObject is an event whose data.object is a Refund.
func stripeRefundObject(evt, typ, re, ch, pi, status string, amount int64) []byte {
	return stripeEventAt(evt, typ, preBasil, fmt.Sprintf(
		`{"id":%q,"object":"refund","amount":%d,"charge":%q,"currency":"usd","payment_intent":%q,"reason":"requested_by_customer","status":%q,"failure_reason":%s}`,
		re, amount, ch, pi, status, map[bool]string{true: `"expired_or_canceled_card"`, false: "null"}[status == "failed"]))
}

// refunded is the sum of the payment's refunds less their reversals.
func (b *bundle) refunded(t *testing.T, paymentKey string) int64 {
	t.Helper()
	return pgtest.Scalar[int64](t, b.pool, `SELECT refunded_minor FROM ledger_payment_audit WHERE payment_key = $1`, paymentKey)
}

// Authorize 1000, capture 600, refund 100: the ledger holds a payment of 600
// and a refund of 100, whatever the API version; the released 400 is no refund.
func TestStripePartialCaptureIsNotARefund(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		version string
		// amount_refunded as Stripe reports it after the capture, and
		// after the real refund of 100
		afterCapture, afterRefund int64
	}{
		{preBasil, 400, 500},
		{basil, 0, 100},
	} {
		t.Run(c.version, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			pi, ch := "pi_cap_"+c.version, "ch_cap_"+c.version
			b.mustHandle(t, b.envelope(t, "stripe", "stripe", "payment_intent.succeeded", stripePI("evt_pi", pi, c.version, 1000, 600), nil))
			if c.afterCapture > 0 {
				res := b.mustHandle(t, b.envelope(t, "stripe", "stripe", "charge.refunded",
					stripeCharge("evt_release", "charge.refunded", c.version, ch, pi, 1000, 600, c.afterCapture, true), nil))
				require.Equal(t, "nothing new refunded", res.Reason, "release")
			}
			res := b.mustHandle(t, b.envelope(t, "stripe", "stripe", "charge.refunded",
				stripeCharge("evt_refund", "charge.refunded", c.version, ch, pi, 1000, 600, c.afterRefund, true), nil))
			require.Equal(t, true, res.Posted, "refund posted")
			require.Equal(t, int64(100), res.AmountMinor, "refund amount")
			require.Equal(t, int64(100), b.refunded(t, "stripe:payment:"+pi), "refunded")
			require.Equal(t, "[psp_clearing USD 500 refunds USD 100 sales USD -600]", fmt.Sprint(b.balances(t, "stripe")), "balances")
		})
	}
}

// Capture 300 of 1000: the release of 700 is not an over-refund, and the
// whole captured amount can still be refunded.
func TestStripeSmallCaptureThenFullRefund(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.mustHandle(t, b.envelope(t, "stripe", "stripe", "payment_intent.succeeded", stripePI("evt_pi", "pi_small", preBasil, 1000, 300), nil))
	res := b.mustHandle(t, b.envelope(t, "stripe", "stripe", "charge.refunded",
		stripeCharge("evt_release", "charge.refunded", preBasil, "ch_small", "pi_small", 1000, 300, 700, true), nil))
	require.Equal(t, "nothing new refunded", res.Reason, "release")
	res = b.mustHandle(t, b.envelope(t, "stripe", "stripe", "charge.refunded",
		stripeCharge("evt_full", "charge.refunded", preBasil, "ch_small", "pi_small", 1000, 300, 1000, true), nil))
	require.Equal(t, int64(300), res.AmountMinor, "full refund")
	require.Equal(t, "[psp_clearing USD 0 refunds USD 300 sales USD -300]", fmt.Sprint(b.balances(t, "stripe")), "balances")
}

// An authorization cancelled or expired before capture: Stripe (before
// basil) refunds it in full; nothing was paid, so nothing is refunded, and
// the envelope does not wait for a payment that will never come.
func TestStripeCancelledAuthorizationIsANoOp(t *testing.T) {
	t.Parallel()
	b := setup(t)
	res := b.mustHandle(t, b.envelope(t, "stripe", "stripe", "charge.refunded",
		stripeCharge("evt_cancel", "charge.refunded", preBasil, "ch_cancel", "pi_cancel", 1000, 0, 1000, false), nil))
	require.Equal(t, handlers.PostingResult{Kind: "refund", Merchant: "stripe", Currency: "USD", Reason: "authorization released, never captured: not a refund"}, res, "result")
	require.Equal(t, 0, pgtest.Count(t, b.pool, "SELECT count(*) FROM ledger_transaction"), "ledger transactions")
}

// A refund that fails is reversed, once, whichever event reports it; a
// refund made after it posts too, and a failure that arrives before its
// refund waits for it.
func TestStripeFailedRefundIsReversed(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const pi, ch, payKey = "pi_fail", "ch_fail", "stripe:payment:pi_fail"
	b.mustHandle(t, b.envelope(t, "stripe", "stripe", "payment_intent.succeeded", stripePI("evt_pi", pi, preBasil, 1000, 1000), nil))

	// The failure first: the refund is not in the ledger yet.
	failed := stripeRefundObject("evt_failed", "charge.refund.updated", "re_1", ch, pi, "failed", 300)
	_, err := b.handle(t, b.envelope(t, "stripe", "stripe", "charge.refund.updated", failed, nil))
	var nr *handlers.NotReadyError
	require.ErrorAs(t, err, &nr, "failure before its refund")
	require.ErrorIs(t, err, ledger.ErrRefundNotPosted, "failure before its refund")

	b.mustHandle(t, b.envelope(t, "stripe", "stripe", "charge.refunded",
		stripeCharge("evt_r1", "charge.refunded", preBasil, ch, pi, 1000, 1000, 300, true), nil))
	// Still pending, not failed: a no-op.
	res := b.mustHandle(t, b.envelope(t, "stripe", "stripe", "refund.updated",
		stripeRefundObject("evt_pending", "refund.updated", "re_1", ch, pi, "pending", 300), nil))
	require.Equal(t, "refund re_1 is pending: nothing to reverse", res.Reason, "pending")

	res = b.mustHandle(t, b.envelope(t, "stripe", "stripe", "charge.refund.updated", failed, nil))
	require.Equal(t, handlers.PostingResult{Posted: true, LedgerTransactionID: res.LedgerTransactionID, Kind: "refund_reversal",
		IdempotencyKey: "stripe:refund_failed:re_1", Merchant: "stripe", AmountMinor: 300, Currency: "USD"}, res, "reversal")
	require.Equal(t, int64(0), b.refunded(t, payKey), "refunded after the failure")
	// The same failure as refund.failed (another event type): once.
	res = b.mustHandle(t, b.envelope(t, "stripe", "stripe", "refund.failed",
		stripeRefundObject("evt_failed2", "refund.failed", "re_1", ch, pi, "failed", 300), nil))
	require.Equal(t, false, res.Posted, "second report")
	require.Equal(t, int64(0), b.refunded(t, payKey), "refunded")

	// A new refund of 300: the charge reports 300 again, which is new money.
	res = b.mustHandle(t, b.envelope(t, "stripe", "stripe", "charge.refunded",
		stripeCharge("evt_r2", "charge.refunded", preBasil, ch, pi, 1000, 1000, 300, true), nil))
	require.Equal(t, int64(300), res.AmountMinor, "refund after the failure")
	require.Equal(t, int64(300), b.refunded(t, payKey), "refunded")
	require.Equal(t, "[psp_clearing USD 700 refunds USD 300 sales USD -1000]", fmt.Sprint(b.balances(t, "stripe")), "balances")
}

// One Stripe account split over two sources (payment intents to one,
// charges to the other) is one merchant: its refunds post, and the same
// event reaching both sources posts once.
func TestStripeSourcesOfOneAccountShareALedger(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.accounts = map[string]string{"stripe-pi": "acct_shared", "stripe-ch": "acct_shared"}
	pay := stripePI("evt_pi", "pi_shared", preBasil, 1000, 1000)
	res := b.mustHandle(t, b.envelope(t, "stripe-pi", "stripe", "payment_intent.succeeded", pay, nil))
	require.Equal(t, "acct_shared", res.Merchant, "payment merchant")
	// The same event at the other source: the business key's no-op.
	res = b.mustHandle(t, b.envelope(t, "stripe-ch", "stripe", "payment_intent.succeeded", pay, nil))
	require.Equal(t, false, res.Posted, "second source posted")

	res = b.mustHandle(t, b.envelope(t, "stripe-ch", "stripe", "charge.refunded",
		stripeCharge("evt_r", "charge.refunded", preBasil, "ch_shared", "pi_shared", 1000, 1000, 250, true), nil))
	require.Equal(t, handlers.PostingResult{Posted: true, LedgerTransactionID: res.LedgerTransactionID, Kind: "refund",
		IdempotencyKey: "stripe:refund:ch_shared:250:evt_r", Merchant: "acct_shared", AmountMinor: 250, Currency: "USD"}, res, "refund")
	require.Equal(t, "[psp_clearing USD 750 refunds USD 250 sales USD -1000]", fmt.Sprint(b.balances(t, "acct_shared")), "balances")
	require.Equal(t, 2, pgtest.Count(t, b.pool, "SELECT count(*) FROM ledger_transaction"), "ledger transactions")
}

// Without an account id, a refund is still posted for its payment's
// merchant (a PaymentIntent id is unique across Stripe): renaming a source,
// or splitting one, does not break the refunds of older payments.
func TestStripeRefundPostsForThePaymentsMerchant(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.mustHandle(t, b.envelope(t, "stripe-old", "stripe", "payment_intent.succeeded", webhooktest.StripePayment("evt_old", "pi_renamed", 1000, "usd"), nil))
	res := b.mustHandle(t, b.envelope(t, "stripe-new", "stripe", "charge.refunded",
		stripeCharge("evt_r", "charge.refunded", preBasil, "ch_renamed", "pi_renamed", 1000, 1000, 400, true), nil))
	require.Equal(t, "stripe-old", res.Merchant, "refund merchant")
	require.Equal(t, int64(400), res.AmountMinor, "refund amount")
}
