package ledger

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/inboxhq/inbox/internal/pg"
)

// Entry is one ledger_entry row with its account's merchant and name:
// debits positive, credits negative. Its JSON is what admin's envelope
// detail shows.
type Entry struct {
	ID          int64  `json:"id"`
	AccountID   int64  `json:"account_id"`
	Merchant    string `json:"merchant"`
	Account     string `json:"account"`
	Currency    string `json:"currency"`
	AmountMinor int64  `json:"amount_minor"`
}

// Entries returns the entries of ledger transaction transactionID in the
// order they were posted.
func Entries(ctx context.Context, q pg.Querier, transactionID int64) ([]Entry, error) {
	rows, err := q.Query(ctx, `
		SELECT e.id, e.account_id, a.merchant, a.name, e.currency, e.amount_minor
		  FROM ledger_entry e JOIN ledger_account a ON a.id = e.account_id
		 WHERE e.transaction_id = $1 ORDER BY e.id`, transactionID)
	if err == nil {
		var es []Entry
		if es, err = pgx.CollectRows(rows, pgx.RowToStructByPos[Entry]); err == nil {
			return es, nil
		}
	}
	return nil, fmt.Errorf("load entries of ledger transaction %d: %w", transactionID, err)
}
