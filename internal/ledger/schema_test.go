package ledger_test

import (
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/inboxhq/inbox/internal/pgtest"
)

// These tests write the ledger with raw SQL, bypassing Post, to show that the
// database itself keeps the ledger balanced and append-only.

func pgCode(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code
	}
	return ""
}

func TestDatabaseRefusesUnbalancedTransactions(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var usd, sales int64
	require.NoError(t, b.pool.QueryRow(b.ctx, "INSERT INTO ledger_account (merchant, name) VALUES ('acme', 'psp_clearing') RETURNING id").Scan(&usd))
	require.NoError(t, b.pool.QueryRow(b.ctx, "INSERT INTO ledger_account (merchant, name) VALUES ('acme', 'sales') RETURNING id").Scan(&sales))

	for _, tt := range []struct {
		name    string
		entries [][3]any // account, currency, amount
	}{
		{"unbalanced", [][3]any{{usd, "USD", 100}, {sales, "USD", -99}}},
		{"one entry", [][3]any{{usd, "USD", 100}}},
		{"balanced across currencies only", [][3]any{{usd, "USD", 100}, {sales, "EUR", -100}}},
		{"no entries", nil},
	} {
		env := b.envelope(t)
		tx, err := b.pool.Begin(b.ctx)
		require.NoError(t, err)
		var id int64
		err = tx.QueryRow(b.ctx, `
			INSERT INTO ledger_transaction (envelope_id, idempotency_key, kind, merchant, payment_key, currency, amount_minor)
			VALUES ($1, $2, 'payment', 'acme', $2, 'USD', 100) RETURNING id`, env, "raw:"+tt.name).Scan(&id)
		require.NoError(t, err, tt.name)
		for _, e := range tt.entries {
			_, err := tx.Exec(b.ctx, "INSERT INTO ledger_entry (transaction_id, account_id, currency, amount_minor) VALUES ($1, $2, $3, $4)", id, e[0], e[1], e[2])
			require.NoError(t, err, "%s: insert entry (the check must wait for COMMIT)", tt.name)
		}
		err = tx.Commit(b.ctx)
		assert.Equal(t, "23514", pgCode(err), "%s: COMMIT = %v, want check_violation", tt.name, err)
	}
	require.Zero(t, pgtest.Count(t, b.pool, "SELECT count(*) FROM ledger_transaction"), "ledger transactions committed")
}

func TestDatabaseRefusesChangesToPostedRows(t *testing.T) {
	t.Parallel()
	b := setup(t)
	res := b.mustPost(t, b.envelope(t), payment("pay:1", "acme", "USD", 100))

	for _, stmt := range []string{
		"UPDATE ledger_entry SET amount_minor = amount_minor * 2 WHERE transaction_id = $1",
		"DELETE FROM ledger_entry WHERE transaction_id = $1",
		"UPDATE ledger_transaction SET amount_minor = 1 WHERE id = $1",
		"DELETE FROM ledger_transaction WHERE id = $1",
	} {
		err := pgx.BeginFunc(b.ctx, b.pool, func(tx pgx.Tx) error {
			_, err := tx.Exec(b.ctx, stmt, res.TransactionID)
			return err
		})
		assert.Equal(t, "42501", pgCode(err), "%s: %v, want insufficient_privilege from the append-only trigger", stmt, err)
	}
	equalEntries(t, b.entries(t, res.TransactionID), []entry{
		{"acme", "psp_clearing", "USD", 100},
		{"acme", "sales", "USD", -100},
	})
}
