package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/inboxhq/inbox/internal/envelope"
	"github.com/inboxhq/inbox/internal/forward"
	"github.com/inboxhq/inbox/internal/handlers"
	"github.com/inboxhq/inbox/internal/pgtest"
	"github.com/inboxhq/inbox/internal/webhooktest"
	"github.com/inboxhq/inbox/internal/worker"
)

// runBatched starts a worker whose River fetches many jobs at once, so the
// envelopes already stored are processed in shared transactions.
func (b *bundle) runBatched(t *testing.T, batching worker.Batching) {
	t.Helper()
	b.runConfig(t, worker.Config{Policy: worker.Policy{SnoozeDefault: time.Hour}, MaxWorkers: 100, Batching: batching})
}

func (b *bundle) waitPending(t *testing.T, id int64) *envelope.Envelope {
	t.Helper()
	e, err := envelope.Get(context.Background(), b.pool, id)
	require.NoError(t, err)
	require.Equal(t, envelope.StatusPending, e.Status)
	return e
}

// transactions counts the distinct transactions that finished the given
// envelopes (the xmin of their rows): fewer than envelopes means batched.
func (b *bundle) transactions(t *testing.T, ids []int64) int {
	t.Helper()
	return pgtest.Count(t, b.pool, `SELECT count(DISTINCT xmin::text) FROM envelope WHERE id = ANY($1)`, ids)
}

func TestBatchedProcessingIsolatesEachEnvelopesOutcome(t *testing.T) {
	t.Parallel()
	b := setup(t)
	// A handler that fails with a plain error once, after posting: its
	// posting must be rolled back and its neighbours must not notice.
	b.registry.Register("standard", "flaky.payment", handlers.HandlerFunc(func(ctx context.Context, run handlers.Run) (json.RawMessage, error) {
		tx, env := run.Tx, run.Envelope
		inner, _ := handlers.Builtin().Lookup("standard", "payment.succeeded")
		if _, err := inner.Handle(ctx, run); err != nil {
			return nil, err
		}
		var attempts int
		if err := tx.QueryRow(ctx, `SELECT attempts FROM envelope WHERE id = $1`, env.ID).Scan(&attempts); err != nil {
			return nil, err
		}
		if attempts == 0 {
			return nil, errors.New("downstream hiccup")
		}
		return json.RawMessage(`{"recovered":true}`), nil
	}))
	b.registry.Register("standard", "panic", handlers.HandlerFunc(func(context.Context, handlers.Run) (json.RawMessage, error) {
		panic("handler bug")
	}))
	// A handler whose statement fails leaves the transaction aborted; the
	// savepoint must restore it for the envelopes after it.
	b.registry.Register("standard", "bad.sql", handlers.HandlerFunc(func(ctx context.Context, run handlers.Run) (json.RawMessage, error) {
		tx := run.Tx
		_, err := tx.Exec(ctx, `SELECT 1/0`)
		return nil, err
	}))

	var good []int64
	for i := range 30 {
		good = append(good, b.insert(t, "standard", fmt.Sprintf("good-%d", i), "payment.succeeded",
			webhooktest.StandardPayment(fmt.Sprintf("pay_%d", i), fmt.Sprintf("m_%d", i%3), 100, "EUR"), 0))
	}
	notReady := b.insert(t, "standard", "refund-early", "payment.refunded", webhooktest.StandardRefund("re_1", "pay_later", "m_0", 50, "EUR"), 0)
	permanent := b.insert(t, "standard", "bad-currency", "payment.succeeded", webhooktest.StandardPayment("pay_x", "m_0", 100, "XYZ"), 0)
	ignored := b.insert(t, "standard", "unrouted", "customer.created", []byte(`{"type":"customer.created"}`), 0)
	flakyID := b.insert(t, "standard", "flaky", "flaky.payment", webhooktest.StandardPayment("pay_flaky", "m_0", 700, "EUR"), 0)
	panicked := b.insert(t, "standard", "panics", "panic", []byte(`{}`), 2)
	badSQL := b.insert(t, "standard", "bad-sql", "bad.sql", []byte(`{}`), 1)

	b.runBatched(t, worker.Batching{MaxBatch: 50, MaxConcurrent: 1})

	for _, id := range good {
		require.Equal(t, envelope.StatusDone, b.waitFinal(t, id).Status)
	}
	require.Less(t, b.transactions(t, good), len(good)/2, "the payments were processed in shared transactions")
	require.Equal(t, envelope.StatusDone, b.waitFinal(t, flakyID).Status)
	require.Equal(t, []string{"retry", "done"}, b.outcomes(t, flakyID))
	require.Equal(t, envelope.StatusIgnored, b.waitFinal(t, ignored).Status)
	e := b.waitFinal(t, permanent)
	require.Equal(t, envelope.StatusFailed, e.Status)
	require.Contains(t, *e.LastError, "permanent")
	e = b.waitFinal(t, panicked)
	require.Equal(t, envelope.StatusFailed, e.Status)
	require.Contains(t, *e.LastError, "handler bug")
	require.Equal(t, []string{"retry", "failed"}, b.outcomes(t, panicked))
	e = b.waitFinal(t, badSQL)
	require.Equal(t, envelope.StatusFailed, e.Status)
	require.Contains(t, *e.LastError, "division by zero")

	// The early refund snoozed (no attempt used) and is still waiting.
	pgtest.Eventually(t, 10*time.Second, "the early refund's first outcome", func() (bool, string) { return len(b.outcomes(t, notReady)) > 0, "" })
	require.Equal(t, []string{"snoozed"}, b.outcomes(t, notReady))
	require.Equal(t, 0, pgtest.Count(t, b.pool, `SELECT attempts FROM envelope WHERE id = $1`, notReady))

	// Exactly the good payments and the recovered one are in the ledger,
	// each once, and it balances.
	require.Equal(t, 31, pgtest.Count(t, b.pool, `SELECT count(*) FROM ledger_transaction`))
	require.Equal(t, 62, pgtest.Count(t, b.pool, `SELECT count(*) FROM ledger_entry`))
	require.Equal(t, 0, pgtest.Count(t, b.pool, `SELECT coalesce(sum(amount_minor), 0) FROM ledger_entry`))
	require.Equal(t, 3700, pgtest.Count(t, b.pool, `SELECT sum(balance_minor) FROM ledger_balance WHERE account = 'psp_clearing'`))
	// One attempt row per attempt: 30 + ignored + permanent + 2 flaky + 2 panic + bad sql + snooze.
	require.Equal(t, 38, pgtest.Count(t, b.pool, `SELECT count(*) FROM envelope_attempt`))
}

func TestAnEnvelopeHeldByAnotherTransactionWaitsAloneWhileItsBatchGoesOn(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var ids []int64
	for i := range 10 {
		ids = append(ids, b.insert(t, "standard", fmt.Sprintf("p-%d", i), "payment.succeeded",
			webhooktest.StandardPayment(fmt.Sprintf("pay_%d", i), "m_1", 100, "EUR"), 0))
	}
	ctx := context.Background()
	tx := pgtest.Tx(t, b.pool)
	_, err := tx.Exec(ctx, `SELECT 1 FROM envelope WHERE id = $1 FOR UPDATE`, ids[0])
	require.NoError(t, err)

	b.runBatched(t, worker.Batching{})
	for _, id := range ids[1:] {
		require.Equal(t, envelope.StatusDone, b.waitFinal(t, id).Status)
	}
	require.Equal(t, 0, pgtest.Count(t, b.pool, `SELECT count(*) FROM envelope WHERE id = $1 AND status <> 'pending'`, ids[0]))
	require.NoError(t, tx.Rollback(ctx))
	require.Equal(t, envelope.StatusDone, b.waitFinal(t, ids[0]).Status)
	require.Equal(t, 10, pgtest.Count(t, b.pool, `SELECT count(*) FROM ledger_transaction`))
}

func TestABatchWhoseCommitFailsIsRetriedOneByOneSoOnlyTheCulpritFails(t *testing.T) {
	t.Parallel()
	b := setup(t)
	// A handler that writes an unbalanced ledger transaction: the deferred
	// balance trigger refuses it only at COMMIT, after every savepoint was
	// released, so the whole batch's commit fails.
	b.registry.Register("standard", "unbalanced", handlers.HandlerFunc(func(ctx context.Context, run handlers.Run) (json.RawMessage, error) {
		tx, env := run.Tx, run.Envelope
		var acct, txID int64
		if _, err := tx.Exec(ctx, `INSERT INTO ledger_account (merchant, name) VALUES ('m_bad', 'sales') ON CONFLICT DO NOTHING`); err != nil {
			return nil, err
		}
		if err := tx.QueryRow(ctx, `SELECT id FROM ledger_account WHERE merchant = 'm_bad' AND name = 'sales'`).Scan(&acct); err != nil {
			return nil, err
		}
		if err := tx.QueryRow(ctx, `INSERT INTO ledger_transaction (envelope_id, idempotency_key, kind, merchant, payment_key, currency, amount_minor)
			VALUES ($1, $2, 'payment', 'm_bad', $2, 'EUR', 5) RETURNING id`, env.ID, fmt.Sprintf("bad:%d", env.ID)).Scan(&txID); err != nil {
			return nil, err
		}
		_, err := tx.Exec(ctx, `INSERT INTO ledger_entry (transaction_id, account_id, currency, amount_minor) VALUES ($1, $2, 'EUR', 5)`, txID, acct)
		return json.RawMessage(`{}`), err
	}))
	var ids []int64
	for i := range 8 {
		ids = append(ids, b.insert(t, "standard", fmt.Sprintf("p-%d", i), "payment.succeeded",
			webhooktest.StandardPayment(fmt.Sprintf("pay_%d", i), "m_1", 100, "EUR"), 0))
	}
	bad := b.insert(t, "standard", "unbalanced", "unbalanced", []byte(`{}`), 3)
	// Hold the first batch at its lock until every job waits behind it, so
	// the culprit and its neighbours share the second one.
	ctx := context.Background()
	hold := pgtest.Tx(t, b.pool)
	_, err := hold.Exec(ctx, `LOCK TABLE envelope IN EXCLUSIVE MODE`)
	require.NoError(t, err)
	b.runBatched(t, worker.Batching{MaxBatch: 50, MaxConcurrent: 1})
	pgtest.EventuallyEvery(t, 10*time.Second, 5*time.Millisecond, "nine running process_envelope jobs", func() (bool, string) {
		return pgtest.Count(t, b.pool, `SELECT count(*) FROM river_job WHERE kind = 'process_envelope' AND state = 'running'`) == 9, ""
	})
	require.NoError(t, hold.Rollback(ctx))
	for _, id := range ids {
		require.Equal(t, envelope.StatusDone, b.waitFinal(t, id).Status)
		state, _ := b.jobState(t, id)
		require.Equal(t, jobDeleted, state)
		require.Equal(t, 1, pgtest.Count(t, b.pool, `SELECT attempt FROM envelope_attempt WHERE envelope_id = $1 AND outcome = 'done'`, id), "a neighbour of the culprit is done at its first attempt")
	}
	// The culprit's own transaction fails at COMMIT too: nothing of it is
	// recorded, River retries it until its attempts run out (discarded),
	// and the envelope stays pending for reconcile and the operator.
	state, _ := b.jobState(t, bad)
	require.Equal(t, "discarded", state)
	e := b.waitPending(t, bad)
	require.Empty(t, b.outcomes(t, bad), "a transaction that cannot commit records nothing")
	require.Nil(t, e.LastError)
	require.Equal(t, 0, pgtest.Count(t, b.pool, `SELECT count(*) FROM ledger_transaction WHERE merchant = 'm_bad'`))
	require.Equal(t, 8, pgtest.Count(t, b.pool, `SELECT count(*) FROM ledger_transaction`))
}

func TestThrottleHoldsInBatchedMode(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const perSecond = 10
	var busy []int64
	for i := range 40 {
		busy = append(busy, b.insert(t, "standard", fmt.Sprintf("busy-%d", i), "payment.succeeded",
			webhooktest.StandardPayment(fmt.Sprintf("pb_%d", i), "m_busy", 100, "EUR"), 0))
	}
	var quiet []int64
	for i := range 5 {
		quiet = append(quiet, b.insert(t, "standard", fmt.Sprintf("quiet-%d", i), "payment.succeeded",
			webhooktest.StandardPayment(fmt.Sprintf("pq_%d", i), "m_quiet", 100, "EUR"), 0))
	}
	b.runConfig(t, worker.Config{MaxWorkers: 100, ReconcileEvery: -1,
		Sources: map[string]worker.SourcePolicy{"src": {ThrottlePerSecond: perSecond}}})
	for _, id := range append(quiet, busy...) {
		require.Equal(t, envelope.StatusDone, b.waitFinal(t, id).Status)
	}
	require.Less(t, b.transactions(t, busy), len(busy), "the throttled envelopes still shared transactions")
	var maxPerSecond int
	require.NoError(t, b.pool.QueryRow(context.Background(), `
		SELECT max(n) FROM (SELECT count(*) AS n FROM envelope_attempt
		  WHERE envelope_id = ANY($1) AND outcome = 'done' GROUP BY date_trunc('second', started_at)) x`, busy).Scan(&maxPerSecond))
	require.LessOrEqual(t, maxPerSecond, perSecond+1, "more than the limit in one second")
	require.Positive(t, pgtest.Count(t, b.pool, `SELECT count(*) FROM envelope_attempt WHERE envelope_id = ANY($1) AND outcome = 'snoozed'`, busy),
		"the burst over the limit waited")
	require.Zero(t, pgtest.Count(t, b.pool, `SELECT count(*) FROM envelope_attempt WHERE envelope_id = ANY($1) AND outcome = 'snoozed'`, quiet),
		"the quiet merchant was not held up")
}

func TestForwardingSourcesGetATransactionPerEnvelopeWhileOthersBatch(t *testing.T) {
	t.Parallel()
	b := setup(t)
	routes := forward.New(b.registry)
	b.router = routes
	routes.Add("fwd", nil, forward.Instead, handlers.HandlerFunc(func(context.Context, handlers.Run) (json.RawMessage, error) {
		return json.RawMessage(`{"forwarded":true}`), nil
	}))
	var fwd, other []int64
	for i := range 6 {
		body := webhooktest.StandardPayment(fmt.Sprintf("pf_%d", i), "m_1", 100, "EUR")
		res, err := b.store.Insert(context.Background(), envelope.NewDelivery{Source: "fwd", Provider: "standard",
			DeliveryID: fmt.Sprintf("fwd-%d", i), EventType: "payment.succeeded", Body: body, Payload: body, Headers: map[string]string{}})
		require.NoError(t, err)
		fwd = append(fwd, res.EnvelopeID)
		other = append(other, b.insert(t, "standard", fmt.Sprintf("other-%d", i), "payment.succeeded",
			webhooktest.StandardPayment(fmt.Sprintf("po_%d", i), "m_1", 100, "EUR"), 0))
	}
	b.runBatched(t, worker.Batching{})
	for _, id := range append(fwd, other...) {
		require.Equal(t, envelope.StatusDone, b.waitFinal(t, id).Status)
	}
	require.Equal(t, len(fwd), b.transactions(t, fwd), "one transaction per forwarded envelope")
	require.Less(t, b.transactions(t, other), len(other))
	require.Equal(t, 6, pgtest.Count(t, b.pool, `SELECT count(*) FROM ledger_transaction`), "mode instead: no posting for the forwarded ones")
}

func TestADeliveryWithNoEventTypeIsIgnoredWithAReasonThatSaysSo(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.runBatched(t, worker.Batching{})
	id := b.insert(t, "standard", "no-type", "", []byte(`{"status":"succeeded"}`), 0)
	e := b.waitFinal(t, id)
	require.Equal(t, envelope.StatusIgnored, e.Status)
	require.JSONEq(t, `{"reason":"no handler for standard event (none: the delivery named no event type)"}`, string(e.Result))
}

func TestBatchedPaymentsPostOnceEvenWhenOneBatchHoldsThemTwice(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var ids []int64
	for i := range 10 {
		ids = append(ids, b.insert(t, "standard", fmt.Sprintf("first-%d", i), "payment.succeeded",
			webhooktest.StandardPayment(fmt.Sprintf("pay_%d", i), "m_1", 100, "EUR"), 0))
	}
	// The same two payments again under other delivery ids, in the same batch.
	for i := range 2 {
		ids = append(ids, b.insert(t, "standard", fmt.Sprintf("again-%d", i), "payment.succeeded",
			webhooktest.StandardPayment(fmt.Sprintf("pay_%d", i), "m_1", 100, "EUR"), 0))
	}
	b.runBatched(t, worker.Batching{MaxBatch: 50, MaxConcurrent: 1})
	for _, id := range ids {
		require.Equal(t, envelope.StatusDone, b.waitFinal(t, id).Status)
	}
	require.Equal(t, 10, pgtest.Count(t, b.pool, `SELECT count(*) FROM ledger_transaction`))
	require.Equal(t, 1000, pgtest.Count(t, b.pool, `SELECT balance_minor FROM ledger_balance WHERE merchant = 'm_1' AND account = 'psp_clearing'`))
	require.Equal(t, 2, pgtest.Count(t, b.pool, `SELECT count(*) FROM envelope WHERE id = ANY($1) AND result->>'posted' = 'false'`, ids))
	// Every envelope's result names the transaction that records its payment.
	require.Equal(t, 12, pgtest.Count(t, b.pool, `SELECT count(*) FROM envelope_with_body e JOIN ledger_transaction t ON t.id = (e.result->>'ledger_transaction_id')::bigint
		WHERE e.id = ANY($1) AND t.idempotency_key = 'standard:m_1:payment:' || (e.payload->'data'->>'payment_id')`, ids))
}
