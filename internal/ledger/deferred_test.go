package ledger_test

import (
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/inboxhq/inbox/internal/ledger"
	"github.com/inboxhq/inbox/internal/pgtest"
)

func TestDeferredPaymentsAreWrittenTogetherWithTheIDsPostAnswered(t *testing.T) {
	t.Parallel()
	b := setup(t)
	e1, e2, e3 := b.envelope(t), b.envelope(t), b.envelope(t)
	var results []ledger.Result
	err := pgx.BeginFunc(b.ctx, b.pool, func(tx pgx.Tx) error {
		d := ledger.NewDeferred(tx)
		w := ledger.NewWriter(tx, ledger.NewAccounts(b.pool), d)
		for i, env := range []int64{e1, e2, e3} {
			res, err := w.Post(b.ctx, env, payment("pay_d"+string(rune('a'+i)), "m_d", "EUR", int64(100*(i+1))))
			require.NoError(t, err)
			results = append(results, res)
		}
		require.Equal(t, 3, d.Len())
		require.Zero(t, pgtest.Count(t, tx, `SELECT count(*) FROM ledger_transaction`), "deferred: nothing written before Flush")
		// A refund of a deferred payment does not see it yet.
		_, err := w.Post(b.ctx, e3, ledger.Posting{Kind: ledger.KindRefund, IdempotencyKey: "re_d", PaymentKey: "pay_da", Merchant: "m_d", Currency: "EUR", AmountMinor: 10})
		require.ErrorIs(t, err, ledger.ErrPaymentNotPosted)
		return d.Flush(b.ctx)
	})
	require.NoError(t, err)
	require.Equal(t, 3, pgtest.Count(t, b.pool, "SELECT count(*) FROM ledger_transaction"))
	require.Equal(t, 6, pgtest.Count(t, b.pool, "SELECT count(*) FROM ledger_entry"))
	for i, res := range results {
		require.True(t, res.Created)
		require.Equal(t, []entry{
			{Merchant: "m_d", Account: ledger.AccountPSPClearing, Currency: "EUR", AmountMinor: int64(100 * (i + 1))},
			{Merchant: "m_d", Account: ledger.AccountSales, Currency: "EUR", AmountMinor: -int64(100 * (i + 1))},
		}, b.entries(t, res.TransactionID), "the id Post answered is the transaction written")
	}
	// Posted for real, they behave as any posting: a refund now finds its payment.
	b.mustPost(t, e3, ledger.Posting{Kind: ledger.KindRefund, IdempotencyKey: "re_d", PaymentKey: "pay_da", Merchant: "m_d", Currency: "EUR", AmountMinor: 10})
}

func TestADeferredPostingThatConflictsMakesFlushRefuseSoTheCallerRetries(t *testing.T) {
	t.Parallel()
	b := setup(t)
	done := b.envelope(t)
	b.mustPost(t, done, payment("pay_once", "m_c", "EUR", 500))
	for name, env := range map[string]int64{"same business key, another envelope": b.envelope(t), "same envelope (a replay)": done} {
		t.Run(name, func(t *testing.T) {
			err := pgx.BeginFunc(b.ctx, b.pool, func(tx pgx.Tx) error {
				d := ledger.NewDeferred(tx)
				if _, err := ledger.NewWriter(tx, nil, d).Post(b.ctx, env, payment("pay_once", "m_c", "EUR", 500)); err != nil {
					return err
				}
				return d.Flush(b.ctx)
			})
			require.ErrorIs(t, err, ledger.ErrDeferredConflict)
		})
	}
	require.Equal(t, 1, pgtest.Count(t, b.pool, "SELECT count(*) FROM ledger_transaction"), "the conflict rolled back with its transaction")
	require.Equal(t, 2, pgtest.Count(t, b.pool, "SELECT count(*) FROM ledger_entry"))
}

func TestAWriterRefusesADeferredOfAnotherTransaction(t *testing.T) {
	t.Parallel()
	b := setup(t)
	env := b.envelope(t)
	err := pgx.BeginFunc(b.ctx, b.pool, func(tx pgx.Tx) error {
		d := ledger.NewDeferred(tx)
		sp, err := tx.Begin(b.ctx)
		require.NoError(t, err)
		// A savepoint is another transaction: a write queued on the outer
		// one's Deferred would escape the savepoint's rollback.
		require.PanicsWithValue(t, "ledger: NewWriter with a Deferred of another transaction", func() { ledger.NewWriter(sp, nil, d) })
		// Without one, the savepoint's writer posts at once, and its
		// rollback undoes the posting.
		res, err := ledger.NewWriter(sp, ledger.NewAccounts(b.pool), nil).Post(b.ctx, env, payment("pay_sp", "m_sp", "EUR", 100))
		require.NoError(t, err)
		require.True(t, res.Created)
		require.Equal(t, 1, pgtest.Count(t, sp, `SELECT count(*) FROM ledger_transaction WHERE idempotency_key = 'pay_sp'`))
		require.NoError(t, sp.Rollback(b.ctx))
		require.Zero(t, pgtest.Count(t, tx, `SELECT count(*) FROM ledger_transaction WHERE idempotency_key = 'pay_sp'`))
		require.Zero(t, d.Len())
		return nil
	})
	require.NoError(t, err)
}
