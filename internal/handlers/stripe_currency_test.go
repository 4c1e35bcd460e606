package handlers_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/inboxhq/inbox/internal/handlers"
	"github.com/inboxhq/inbox/internal/ledger"
	"github.com/inboxhq/inbox/internal/pgtest"
)

// A Stripe refund in another currency than its payment is refused by the
// handler itself, also when its delta is zero (its cumulative amount is
// already refunded in the payment's currency) and it would never reach
// ledger.Post's own check: it must not pass as "nothing new refunded".
func TestStripeRefundInAnotherCurrencyIsPermanentEvenWithNothingNew(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.mustHandle(t, b.envelope(t, "stripe", "stripe", "payment_intent.succeeded", fixture(t, "stripe_payment_intent_succeeded.json"), nil))
	refund300 := fixture(t, "stripe_charge_refunded_300.json")
	b.mustHandle(t, b.envelope(t, "stripe", "stripe", "charge.refunded", refund300, nil))
	before := pgtest.Count(t, b.pool, "SELECT count(*) FROM ledger_transaction")

	res, err := b.handle(t, b.envelope(t, "stripe", "stripe", "charge.refunded", edit(t, refund300, "data.object.currency", "eur"), nil))
	var pe *handlers.PermanentError
	var le *ledger.PostingError
	require.ErrorAs(t, err, &pe, "handle = %s", res)
	require.ErrorAs(t, err, &le, "handle = %s", res)
	require.Contains(t, le.Reason, "refund currency EUR differs")
	require.Equal(t, before, pgtest.Count(t, b.pool, "SELECT count(*) FROM ledger_transaction"), "ledger transactions")
}
