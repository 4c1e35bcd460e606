package handlers_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/inboxhq/inbox/internal/envelope"
	"github.com/inboxhq/inbox/internal/handlers"
	"github.com/inboxhq/inbox/internal/handlers/handlerstest"
	"github.com/inboxhq/inbox/internal/pgtest"
	"github.com/inboxhq/inbox/internal/provider"
	"github.com/inboxhq/inbox/internal/webhooktest"
	"github.com/inboxhq/inbox/internal/worker"
)

// The built-in payment handlers as the worker runs them (the test kit):
// payments of one merchant delivered together share batches, so their
// postings go through the deferred write and the account cache; a refund
// delivered before its payment snoozes, then posts once the payment has.
// The ledger ends with each payment once and the refund once, balanced.
func TestPaymentsAsTheWorkerRunsThem(t *testing.T) {
	t.Parallel()
	kit := handlerstest.New(t, handlers.Builtin())
	refund := kit.Deliver(t, handlerstest.Delivery{Provider: provider.Standard, EventType: "payment.refunded",
		Body: webhooktest.StandardRefund("re_1", "pay_0", "m_kit", 300, "EUR")})
	ctx := context.Background()
	pgtest.Eventually(t, 30*time.Second, "the refund snoozed, its payment not posted", func() (bool, string) {
		n := pgtest.Count(t, kit.Pool, fmt.Sprintf(`SELECT count(*) FROM envelope_attempt WHERE envelope_id = %d AND outcome = 'snoozed'`, refund))
		return n > 0, fmt.Sprintf("%d snoozed attempts", n)
	})
	var ids []int64
	for i := range 8 {
		ids = append(ids, kit.Deliver(t, handlerstest.Delivery{Provider: provider.Standard, EventType: "payment.succeeded",
			Body: webhooktest.StandardPayment(fmt.Sprintf("pay_%d", i), "m_kit", 1000, "EUR")}))
	}
	for _, id := range ids {
		o := kit.Wait(t, id)
		require.Equal(t, envelope.StatusDone, o.Status, o.LastError)
	}
	o := kit.Wait(t, refund)
	require.Equal(t, envelope.StatusDone, o.Status, o.LastError)
	var payments, refunds, unbalanced int
	require.NoError(t, kit.Pool.QueryRow(ctx, `
		SELECT (SELECT count(*) FROM ledger_transaction WHERE kind = 'payment'),
		       (SELECT count(*) FROM ledger_transaction WHERE kind = 'refund'),
		       (SELECT count(*) FROM (SELECT transaction_id FROM ledger_entry GROUP BY transaction_id, currency HAVING sum(amount_minor) <> 0) x)`,
	).Scan(&payments, &refunds, &unbalanced))
	require.Equal(t, []int{8, 1, 0}, []int{payments, refunds, unbalanced})
}

// A source's account_id reaches the handler as the worker gives it
// (Run.Account): a Stripe platform event posts for the account.
func TestTheKitGivesHandlersTheSourcesAccount(t *testing.T) {
	t.Parallel()
	kit := handlerstest.New(t, handlers.Builtin(), handlerstest.WithSource("stripe-eu", worker.SourcePolicy{AccountID: "acct_kit"}))
	id := kit.Deliver(t, handlerstest.Delivery{Source: "stripe-eu", Provider: provider.Stripe, EventType: "payment_intent.succeeded",
		Body: webhooktest.StripePayment("evt_kit", "pi_kit", 1000, "usd")})
	o := kit.Wait(t, id)
	require.Equal(t, envelope.StatusDone, o.Status, o.LastError)
	var merchant string
	require.NoError(t, kit.Pool.QueryRow(context.Background(), `SELECT merchant FROM ledger_transaction WHERE envelope_id = $1`, id).Scan(&merchant))
	require.Equal(t, "acct_kit", merchant)
}
