package audit_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/inboxhq/inbox/internal/ledger"
	"github.com/inboxhq/inbox/internal/pgtest"
)

// ledger_balance_at counts exactly the transactions posted at or before its
// argument, without back-dating anything: a clock reading taken between two
// commits splits them.
func TestLedgerBalanceAtCountsPostingsUpToItsTime(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	s := newSeeder(t, pool)
	post := func(n int, p *ledger.Posting) time.Time {
		t.Helper()
		id := s.receive("payments", "standard", fmt.Sprintf("msg_%d", n), string(p.Kind), []byte(fmt.Sprintf(`{"n":%d}`, n)), nil)
		var postedAt time.Time
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			res, err := ledger.Post(ctx, tx, id, *p)
			if err != nil {
				return err
			}
			return tx.QueryRow(ctx, `SELECT posted_at FROM ledger_transaction WHERE id = $1`, res.TransactionID).Scan(&postedAt)
		})
		require.NoError(t, err)
		return postedAt
	}
	balances := func(at string, args ...any) []string {
		t.Helper()
		rows, err := pool.Query(ctx, `SELECT format('%s %s %s %s/%s', merchant, account, currency, balance_minor, entries) FROM `+at+` ORDER BY 1`, args...)
		require.NoError(t, err)
		out, err := pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		return out
	}

	firstAt := post(1, payment("m", "p1", 1000, "USD"))
	var between time.Time
	require.NoError(t, pool.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&between))
	post(2, payment("m", "p2", 250, "USD"))
	post(3, refund("m", "r1", "p1", 100, "USD"))

	require.Empty(t, balances(`ledger_balance_at($1)`, firstAt.Add(-time.Microsecond)))
	want := []string{"m psp_clearing USD 1000/1", "m sales USD -1000/1"}
	require.Equal(t, want, balances(`ledger_balance_at($1)`, firstAt), "inclusive of its time")
	require.Equal(t, want, balances(`ledger_balance_at($1)`, between))
	require.Equal(t, []string{"m psp_clearing USD 1150/3", "m refunds USD 100/1", "m sales USD -1250/2"}, balances(`ledger_balance_at(now())`))
	require.Equal(t, balances(`ledger_balance`), balances(`ledger_balance_at(now())`), "now, it is ledger_balance")
}

// The audit views read an envelope nobody processed yet without error, and
// with zeros, not NULLs, where there is nothing to count.
func TestEnvelopeAuditOfAFreshEnvelope(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	s := newSeeder(t, pool)
	body := []byte(`{"ref":"main"}`)
	id := s.receive("gh", "github", "d-1", "push", body, nil)
	var status, sha string
	var attemptRows, replays, conflicts int
	var lastOutcome, ledgerID any
	var bodyKept bool
	err := pool.QueryRow(ctx, `
		SELECT status, attempt_rows, replays, conflicts, last_outcome, ledger_transaction_id, body_kept, body_sha256
		  FROM envelope_audit WHERE id = $1`, id).Scan(&status, &attemptRows, &replays, &conflicts, &lastOutcome, &ledgerID, &bodyKept, &sha)
	require.NoError(t, err)
	require.Equal(t, "pending", status)
	require.Zero(t, attemptRows+replays+conflicts)
	require.Nil(t, lastOutcome)
	require.Nil(t, ledgerID)
	require.True(t, bodyKept)
	sum := sha256.Sum256(body)
	require.Equal(t, hex.EncodeToString(sum[:]), sha)

	var deliveries, pending int
	require.NoError(t, pool.QueryRow(ctx, `SELECT deliveries, pending FROM envelope_retry_stats WHERE source = 'gh'`).Scan(&deliveries, &pending))
	require.Equal(t, 1, deliveries)
	require.Equal(t, 1, pending)
}
