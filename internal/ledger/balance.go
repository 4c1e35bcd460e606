package ledger

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/inboxhq/inbox/internal/pg"
)

// Balance is one account's balance in one currency, from the ledger_balance
// view. Debits are positive: psp_clearing and refunds carry positive
// balances, sales a negative one.
type Balance struct {
	AccountID    int64
	Merchant     string
	Account      string
	Currency     string
	BalanceMinor int64
	Entries      int64
}

// Balances returns the merchant's balances ordered by account and currency;
// an empty merchant returns every merchant's. Accounts without entries are
// not listed.
func Balances(ctx context.Context, q pg.Querier, merchant string) ([]Balance, error) {
	rows, err := q.Query(ctx, `
		SELECT account_id, merchant, account, currency, balance_minor, entries
		  FROM ledger_balance
		 WHERE $1 = '' OR merchant = $1
		 ORDER BY merchant, account, currency`, merchant)
	if err != nil {
		return nil, fmt.Errorf("read balances of merchant %q: %w", merchant, err)
	}
	bs, err := pgx.CollectRows(rows, pgx.RowToStructByPos[Balance])
	if err != nil {
		return nil, fmt.Errorf("read balances of merchant %q: %w", merchant, err)
	}
	return bs, nil
}

// CountTransactions returns how many ledger transactions are posted.
func CountTransactions(ctx context.Context, q pg.Querier) (int64, error) {
	var n int64
	if err := q.QueryRow(ctx, `SELECT count(*) FROM ledger_transaction`).Scan(&n); err != nil {
		return 0, fmt.Errorf("count ledger transactions: %w", err)
	}
	return n, nil
}
