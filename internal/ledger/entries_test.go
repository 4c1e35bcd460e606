package ledger_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/inboxhq/inbox/internal/ledger"
)

func TestEntriesInPostingOrderWithAccountNames(t *testing.T) {
	t.Parallel()
	b := setup(t)
	res := b.mustPost(t, b.envelope(t), payment("pay:entries", "acme", "EUR", 500))

	es, err := ledger.Entries(b.ctx, b.pool, res.TransactionID)
	require.NoError(t, err)
	require.Len(t, es, 2)
	require.Less(t, es[0].ID, es[1].ID, "ordered by id")
	var sum int64
	for _, e := range es {
		require.NotZero(t, e.AccountID)
		require.Equal(t, "acme", e.Merchant)
		require.Equal(t, "EUR", e.Currency)
		sum += e.AmountMinor
	}
	require.Zero(t, sum, "balanced")
	require.ElementsMatch(t, []string{ledger.AccountPSPClearing, ledger.AccountSales}, []string{es[0].Account, es[1].Account})

	none, err := ledger.Entries(b.ctx, b.pool, -1)
	require.NoError(t, err)
	require.Empty(t, none)
}

func TestCountTransactions(t *testing.T) {
	t.Parallel()
	b := setup(t)
	n, err := ledger.CountTransactions(b.ctx, b.pool)
	require.NoError(t, err)
	require.Zero(t, n)
	b.mustPost(t, b.envelope(t), payment("pay:count", "acme", "EUR", 5))
	n, err = ledger.CountTransactions(b.ctx, b.pool)
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
}
