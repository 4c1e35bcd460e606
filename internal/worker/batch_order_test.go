package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/inboxhq/inbox/internal/admin"
	"github.com/inboxhq/inbox/internal/envelope"
	"github.com/inboxhq/inbox/internal/handlers"
	"github.com/inboxhq/inbox/internal/pgtest"
	"github.com/inboxhq/inbox/internal/webhooktest"
	"github.com/inboxhq/inbox/internal/worker"
)

// gate starts a batched worker (one batch at a time) that is busy with one
// envelope until the want envelopes stored by fill have all been fetched by
// River (their jobs running, waiting for a batch), so that they join the
// next batch together: a batch of known members, whatever order River hands
// their jobs over in, however slow the machine.
func (b *bundle) gate(t *testing.T, cfg worker.Config, want int, fill func()) {
	t.Helper()
	filled := make(chan struct{})
	b.registry.Register("standard", "gate", handlers.HandlerFunc(func(ctx context.Context, _ handlers.Run) (json.RawMessage, error) {
		select {
		case <-filled:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		// Past the deadline the gate opens anyway: the test's own
		// assertions then report a batch of other members.
		err := pgtest.Poll(ctx, 20*time.Second, 5*time.Millisecond, func() (bool, error) {
			var running int
			err := b.pool.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE state = 'running'`).Scan(&running)
			return running >= want+1, err
		})
		if err != nil && !errors.Is(err, pgtest.ErrTimedOut) {
			return nil, err
		}
		time.Sleep(100 * time.Millisecond) // from fetched to waiting for the batch
		return nil, nil
	}))
	gate := b.insert(t, "standard", "gate", "gate", []byte(`{}`), 0)
	cfg.MaxWorkers = 100
	cfg.Batching = worker.Batching{MaxBatch: 50, MaxConcurrent: 1}
	b.runConfig(t, cfg)
	pgtest.EventuallyEvery(t, 10*time.Second, 5*time.Millisecond, "the gate's job to run", func() (bool, string) {
		return pgtest.Count(t, b.pool, `SELECT count(*) FROM river_job WHERE state = 'running' AND (args->>'envelope_id')::bigint = $1`, gate) == 1, ""
	})
	fill()
	close(filled)
	require.Equal(t, envelope.StatusDone, b.waitFinal(t, gate).Status)
}

// A batch defers its payments' ledger writes to one statement at its end, so
// a refund processed in the same batch as its payment cannot see the payment
// yet. The batch runs in receipt order, so that costs a re-run of the batch
// (each posting then written on its own, in order), never a snooze of the
// refund, and never a wrong balance.
func TestARefundBatchedWithItsPaymentPostsAfterItWithoutWaiting(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const n = 20
	var payments, refunds []int64
	b.gate(t, worker.Config{Policy: worker.Policy{SnoozeDefault: time.Hour}}, 2*n, func() {
		for i := range n {
			pay, merchant := fmt.Sprintf("pay_%d", i), fmt.Sprintf("m_%d", i%4)
			payments = append(payments, b.insert(t, "standard", "p-"+pay, "payment.succeeded", webhooktest.StandardPayment(pay, merchant, 1000, "EUR"), 0))
			refunds = append(refunds, b.insert(t, "standard", "r-"+pay, "payment.refunded", webhooktest.StandardRefund("re_"+pay, pay, merchant, 300, "EUR"), 0))
		}
	})

	for i := range n {
		require.Equal(t, envelope.StatusDone, b.waitFinal(t, payments[i]).Status)
		require.Equal(t, envelope.StatusDone, b.waitFinal(t, refunds[i]).Status)
		require.Equal(t, []string{"done"}, b.outcomes(t, refunds[i]), "refund %d waited although its payment was in its batch", i)
	}
	all := append(append([]int64{}, payments...), refunds...)
	require.Equal(t, 1, b.transactions(t, all), "payments and refunds were one batch")
	require.Equal(t, n, pgtest.Count(t, b.pool, `SELECT count(*) FROM ledger_transaction WHERE kind = 'payment'`))
	require.Equal(t, n, pgtest.Count(t, b.pool, `SELECT count(*) FROM ledger_transaction WHERE kind = 'refund'`))
	require.Equal(t, n*700, pgtest.Count(t, b.pool, `SELECT sum(balance_minor) FROM ledger_balance WHERE account = 'psp_clearing'`))
	require.Equal(t, 0, pgtest.Count(t, b.pool, `SELECT coalesce(sum(amount_minor), 0) FROM ledger_entry`))
}

// A refund stored before its payment, with both in one batch, waits (a
// snooze, no attempt used) and posts once the payment has: the order a
// provider sends events in does not matter in batched mode either.
func TestARefundAheadOfItsPaymentInOneBatchWaitsThenPosts(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var refund, payment int64
	var others []int64
	b.gate(t, worker.Config{Policy: worker.Policy{SnoozeDefault: 50 * time.Millisecond, MaxAge: time.Hour}}, 12, func() {
		refund = b.insert(t, "standard", "r-early", "payment.refunded", webhooktest.StandardRefund("re_1", "pay_1", "m_1", 400, "EUR"), 0)
		for i := range 10 {
			others = append(others, b.insert(t, "standard", fmt.Sprintf("other-%d", i), "payment.succeeded",
				webhooktest.StandardPayment(fmt.Sprintf("pay_o%d", i), "m_1", 100, "EUR"), 0))
		}
		payment = b.insert(t, "standard", "p-late", "payment.succeeded", webhooktest.StandardPayment("pay_1", "m_1", 1000, "EUR"), 0)
	})

	require.Equal(t, envelope.StatusDone, b.waitFinal(t, payment).Status)
	for _, id := range others {
		require.Equal(t, envelope.StatusDone, b.waitFinal(t, id).Status)
	}
	require.Equal(t, 1, b.transactions(t, append([]int64{payment}, others...)))
	require.Equal(t, envelope.StatusDone, b.waitFinal(t, refund).Status)
	require.Equal(t, []string{"snoozed", "done"}, b.outcomes(t, refund), "the refund ran first, before its payment had posted")
	require.Equal(t, 1, pgtest.Count(t, b.pool, `SELECT attempts FROM envelope WHERE id = $1`, refund), "a snooze uses no attempt")
	require.Equal(t, 1, pgtest.Count(t, b.pool, `SELECT count(*) FROM ledger_transaction WHERE kind = 'refund'`))
	require.Equal(t, 1000+1000-400, pgtest.Count(t, b.pool, `SELECT sum(balance_minor) FROM ledger_balance WHERE account = 'psp_clearing'`))
}

// Replaying many processed envelopes runs them again in shared batches: each
// gets its second attempt row and replay audit row, and the ledger is
// unchanged (the postings are idempotent, and a replayed envelope's posting
// is never deferred, so a batch of replays cannot conflict with itself).
func TestReplayInBatchedModeRecordsEveryAttemptAndPostsNothingTwice(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const n = 40
	var ids []int64
	for i := range n {
		ids = append(ids, b.insert(t, "standard", fmt.Sprintf("d-%d", i), "payment.succeeded",
			webhooktest.StandardPayment(fmt.Sprintf("pay_%d", i), fmt.Sprintf("m_%d", i%5), 250, "EUR"), 0))
	}
	b.runBatched(t, worker.Batching{MaxBatch: 50, MaxConcurrent: 1})
	for _, id := range ids {
		require.Equal(t, envelope.StatusDone, b.waitFinal(t, id).Status)
	}
	ledgerBefore := pgtest.Count(t, b.pool, `SELECT count(*) FROM ledger_entry`)

	rc, err := envelope.NewInsertClient(b.pool, slog.New(slog.NewTextHandler(io.Discard, nil)))
	require.NoError(t, err)
	res, err := admin.Replay(context.Background(), b.pool, rc, admin.ReplayRequest{
		Filter: admin.Filter{Source: "src"}, Actor: "test", Reason: "batched replay",
	})
	require.NoError(t, err)
	require.Equal(t, n, res.Replayed)

	pgtest.EventuallyEvery(t, 20*time.Second, 20*time.Millisecond, "the replayed envelopes to be done at their second attempt", func() (bool, string) {
		return pgtest.Count(t, b.pool, `SELECT count(*) FROM envelope WHERE id = ANY($1) AND status = 'done' AND attempts = 2`, ids) == n, ""
	})
	for _, id := range ids {
		require.Equal(t, []string{"done", "done"}, b.outcomes(t, id))
	}
	require.Less(t, b.transactions(t, ids), n/2, "the replays were processed in shared transactions")
	require.Equal(t, n, pgtest.Count(t, b.pool, `SELECT count(*) FROM envelope_replay WHERE envelope_id = ANY($1) AND reason = 'batched replay'`, ids))
	require.Equal(t, ledgerBefore, pgtest.Count(t, b.pool, `SELECT count(*) FROM ledger_entry`))
	require.Equal(t, n, pgtest.Count(t, b.pool, `SELECT count(*) FROM ledger_transaction`))
	require.Equal(t, 0, pgtest.Count(t, b.pool, `SELECT count(*) FROM river_job WHERE kind = 'process_envelope'`), "every replay's job deleted with its envelope done")
}
