package worker_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/inboxhq/inbox/internal/envelope"
	"github.com/inboxhq/inbox/internal/pgtest"
	"github.com/inboxhq/inbox/internal/worker"
)

// A verified body that jsonb cannot hold (a lone surrogate escape, a number
// beyond numeric) is stored with its raw body and no parsed payload,
// and is processed like any other: the handler reads the body.
func TestBodyJSONBCannotHoldIsProcessed(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.run(t, worker.Policy{})
	body := []byte(`{"type":"payment.succeeded","note":"Thanks \ud83d","big":1e1000000,` +
		`"data":{"payment_id":"pay_jsonb","merchant_id":"m_jsonb","amount_minor":4321,"currency":"EUR"}}`)
	id := b.insert(t, "standard", "msg_jsonb", "payment.succeeded", body, 0)
	require.Equal(t, 1, pgtest.Count(t, b.pool, `SELECT count(*) FROM envelope_with_body WHERE id = $1 AND payload IS NULL AND body = $2`, id, body))
	e := b.waitFinal(t, id)
	require.Equal(t, envelope.StatusDone, e.Status, "last error %v", e.LastError)
	require.Equal(t, 4321, pgtest.Count(t, b.pool, "SELECT balance_minor FROM ledger_balance WHERE merchant = 'm_jsonb' AND account = 'psp_clearing'"))
}
