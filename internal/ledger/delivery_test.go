package ledger_test

import (
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/inboxhq/inbox/internal/envelope/envelopetest"
	"github.com/inboxhq/inbox/internal/ledger"
)

// A posting records its envelope's source and delivery id, whether the
// caller passes them (checked against the envelope's key), passes none
// (looked up), or passes another delivery's (the envelope's win), on the
// immediate and the deferred path alike.
func TestAPostingRecordsItsEnvelopesDelivery(t *testing.T) {
	t.Parallel()
	b := setup(t)
	envelopetest.Insert(t, b.pool, envelopetest.Row{Source: "other", DeliveryID: "msg_other"}) // a real delivery, not this envelope's
	for i, tc := range []struct {
		name             string
		source, delivery string
		deferred         bool
	}{
		{"given", "shop", "msg_given", false},
		{"none given", "", "", false},
		{"another delivery's", "other", "msg_other", false},
		{"given, deferred", "shop", "msg_given_d", true},
		{"another delivery's, deferred", "other", "msg_other", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			delivery := "msg_" + string(rune('a'+i))
			if tc.delivery != "" && tc.source == "shop" {
				delivery = tc.delivery
			}
			env := envelopetest.Insert(t, b.pool, envelopetest.Row{Source: "shop", DeliveryID: delivery})
			p := payment("pay_delivery_"+string(rune('a'+i)), "m_delivery", "EUR", 100)
			p.Source, p.DeliveryID = tc.source, tc.delivery
			var res ledger.Result
			err := pgx.BeginFunc(b.ctx, b.pool, func(tx pgx.Tx) error {
				var d *ledger.Deferred
				if tc.deferred {
					d = ledger.NewDeferred(tx)
				}
				var err error
				if res, err = ledger.NewWriter(tx, nil, d).Post(b.ctx, env, p); err != nil {
					return err
				}
				return d.Flush(b.ctx)
			})
			require.NoError(t, err)
			var source, got string
			require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT source, delivery_id FROM ledger_transaction WHERE id = $1`, res.TransactionID).Scan(&source, &got))
			require.Equal(t, []string{"shop", delivery}, []string{source, got})
		})
	}
}
