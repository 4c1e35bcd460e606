package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/inboxhq/inbox/internal/envelope"
	"github.com/inboxhq/inbox/internal/handlers"
	"github.com/inboxhq/inbox/internal/pgtest"
	"github.com/inboxhq/inbox/internal/webhooktest"
)

// batchRig drives ProcessWorker.Work the way River does, but with batches
// of known members: each job is a real river_job row set running (so the
// fence and the completion see what they see under River), and a gate
// envelope holds the worker's one batch slot until every job under test
// waits in the queue, so that they all form the next batch. No River
// client fetches anything, and nothing waits on a sleep.
type batchRig struct {
	pool     *pgxpool.Pool // the owner's: seeds and checks
	store    *envelope.Store
	river    *river.Client[pgx.Tx]
	registry *handlers.Registry
	w        *ProcessWorker
	entered  chan struct{}
	open     chan struct{}
}

func newBatchRig(t *testing.T) *batchRig {
	t.Helper()
	url := pgtest.NewURL(t)
	pool := pgtest.OpenPool(t, url)
	wp := pgtest.OpenPool(t, pgtest.RoleURL(t, url, pgtest.RoleWorker))
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	rc, err := envelope.NewInsertClient(pool, logger)
	require.NoError(t, err)
	r := &batchRig{pool: pool, store: envelope.NewStore(pool, rc), river: rc, registry: handlers.Builtin(),
		entered: make(chan struct{}), open: make(chan struct{})}
	r.registry.Register("standard", "gate", handlers.HandlerFunc(func(ctx context.Context, _ handlers.Run) (json.RawMessage, error) {
		close(r.entered)
		select {
		case <-r.open:
			return json.RawMessage(`{}`), nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}))
	r.w = &ProcessWorker{Pool: wp, Registry: r.registry, Policy: DefaultPolicy, Logger: logger, Name: "rig",
		Batching: Batching{MaxBatch: 50, MaxConcurrent: 1}}
	return r
}

func (r *batchRig) insert(t *testing.T, provider, deliveryID, eventType string, body []byte) int64 {
	t.Helper()
	res, err := r.store.Insert(context.Background(), envelope.NewDelivery{Source: "src", Provider: provider,
		DeliveryID: deliveryID, EventType: eventType, Body: body, Payload: body, Headers: map[string]string{}})
	require.NoError(t, err)
	require.False(t, res.Duplicate)
	return res.EnvelopeID
}

// running marks the envelope's job running at its next attempt, as River's
// fetch does, and returns it as Work receives it.
func (r *batchRig) running(t *testing.T, envelopeID int64) *river.Job[envelope.ProcessArgs] {
	t.Helper()
	ctx := context.Background()
	var jobID int64
	require.NoError(t, r.pool.QueryRow(ctx, `
		UPDATE river_job SET state = 'running', attempt = attempt + 1, attempted_at = now(), attempted_by = array['rig']
		 WHERE kind = 'process_envelope' AND (args->>'envelope_id')::bigint = $1 AND state = 'available'
		RETURNING id`, envelopeID).Scan(&jobID))
	row, err := r.river.JobGet(ctx, jobID)
	require.NoError(t, err)
	job := &river.Job[envelope.ProcessArgs]{JobRow: row}
	require.NoError(t, json.Unmarshal(row.EncodedArgs, &job.Args))
	return job
}

// batch starts Work for the envelopes' jobs so that they form one batch,
// and returns each one's verdict on a channel (buffered: nothing blocks on
// a test that stops reading).
func (r *batchRig) batch(t *testing.T, ids []int64) []chan error {
	t.Helper()
	gate := r.insert(t, "standard", "gate", "gate", []byte(`{}`))
	gateJob := r.running(t, gate)
	jobs := make([]*river.Job[envelope.ProcessArgs], len(ids))
	for i, id := range ids {
		jobs[i] = r.running(t, id)
	}
	gateDone := make(chan error, 1)
	go func() { gateDone <- r.w.Work(context.Background(), gateJob) }()
	select {
	case <-r.entered:
	case <-time.After(20 * time.Second):
		t.Fatal("the gate's handler never ran")
	}
	out := make([]chan error, len(jobs))
	for i, job := range jobs {
		out[i] = make(chan error, 1)
		go func() { out[i] <- r.w.Work(context.Background(), job) }()
	}
	pgtest.EventuallyEvery(t, 20*time.Second, time.Millisecond, "every job waiting for the next batch", func() (bool, string) {
		n := r.w.batched.Queued()
		return n == len(jobs), fmt.Sprintf("%d of %d queued", n, len(jobs))
	})
	close(r.open)
	require.NoError(t, <-gateDone)
	return out
}

func verdict(t *testing.T, ch chan error) error {
	t.Helper()
	select {
	case err := <-ch:
		return err
	case <-time.After(30 * time.Second):
		t.Fatal("no verdict in 30 s")
		return nil
	}
}

// transactions counts the distinct transactions that last wrote the
// envelopes' rows.
func (r *batchRig) transactions(t *testing.T, ids []int64) int {
	t.Helper()
	return pgtest.Count(t, r.pool, `SELECT count(DISTINCT xmin::text) FROM envelope WHERE id = ANY($1)`, ids)
}

func (r *batchRig) status(t *testing.T, id int64) envelope.Status {
	t.Helper()
	e, err := envelope.Get(context.Background(), r.pool, id)
	require.NoError(t, err)
	return e.Status
}

func payments(t *testing.T, r *batchRig, n int, prefix string) []int64 {
	t.Helper()
	ids := make([]int64, n)
	for i := range ids {
		ids[i] = r.insert(t, "standard", fmt.Sprintf("%s-%d", prefix, i), "payment.succeeded",
			webhooktest.StandardPayment(fmt.Sprintf("pay_%s_%d", prefix, i), "m_1", 100, "EUR"))
	}
	return ids
}

// An envelope that another transaction holds when its batch runs is
// processed afterwards, on its own, once the row is free: never taken for
// "not found" (its job cancelled, the envelope left pending until the
// periodic reconcile). Its neighbours commit together meanwhile.
func TestAnEnvelopeHeldWhenItsBatchRunsIsProcessedAfterwards(t *testing.T) {
	t.Parallel()
	r := newBatchRig(t)
	ids := payments(t, r, 6, "held")
	held := ids[2]
	holder := pgtest.Tx(t, r.pool)
	_, err := holder.Exec(context.Background(), `SELECT 1 FROM envelope WHERE id = $1 FOR UPDATE`, held)
	require.NoError(t, err)

	verdicts := r.batch(t, ids)
	others := append(append([]int64(nil), ids[:2]...), ids[3:]...)
	pgtest.Eventually(t, 20*time.Second, "the held envelope's neighbours done", func() (bool, string) {
		n := pgtest.Count(t, r.pool, `SELECT count(*) FROM envelope WHERE id = ANY($1) AND status = 'done'`, others)
		return n == len(others), fmt.Sprintf("%d of %d done", n, len(others))
	})
	require.Equal(t, 1, r.transactions(t, others), "the neighbours shared one transaction")
	require.Equal(t, envelope.StatusPending, r.status(t, held))
	require.Equal(t, 1, pgtest.Count(t, r.pool, `SELECT count(*) FROM river_job WHERE (args->>'envelope_id')::bigint = $1 AND state = 'running'`, held),
		"the held envelope's job is still running, waiting for the row")

	require.NoError(t, holder.Rollback(context.Background()))
	for i, ch := range verdicts {
		require.NoError(t, verdict(t, ch), "envelope %d", ids[i])
	}
	require.Equal(t, envelope.StatusDone, r.status(t, held))
	require.Equal(t, 0, pgtest.Count(t, r.pool, `SELECT count(*) FROM river_job WHERE (args->>'envelope_id')::bigint = $1`, held), "the held envelope's job was deleted when it was done")
	require.Equal(t, 6, pgtest.Count(t, r.pool, `SELECT count(*) FROM ledger_transaction WHERE envelope_id = ANY($1)`, ids))
}

// A Shopify payment presented in another currency keeps its presentment
// row when it is posted in a batch (where payments are written together in
// one statement), as when it is posted alone.
func TestABatchedShopifyPaymentKeepsItsPresentment(t *testing.T) {
	t.Parallel()
	r := newBatchRig(t)
	presented := r.insert(t, "shopify", "order-1", "orders/paid", []byte(`{"id":1001,"name":"#1001","financial_status":"paid",
		"total_price":"110.00","currency":"USD","presentment_currency":"EUR",
		"total_price_set":{"shop_money":{"amount":"110.00","currency_code":"USD"},"presentment_money":{"amount":"100.00","currency_code":"EUR"}}}`))
	plain := r.insert(t, "shopify", "order-2", "orders/paid", webhooktest.ShopifyOrderPaid(1002, "20.00", "USD"))
	others := payments(t, r, 3, "shop")
	ids := append([]int64{presented, plain}, others...)
	for _, ch := range r.batch(t, ids) {
		require.NoError(t, verdict(t, ch))
	}
	require.Equal(t, 1, r.transactions(t, ids), "one batch")
	var currency string
	var amount int64
	require.NoError(t, r.pool.QueryRow(context.Background(), `
		SELECT p.currency, p.amount_minor FROM ledger_presentment p JOIN ledger_transaction t ON t.id = p.transaction_id
		 WHERE t.envelope_id = $1`, presented).Scan(&currency, &amount))
	require.Equal(t, "EUR", currency)
	require.Equal(t, int64(10000), amount)
	require.Equal(t, 1, pgtest.Count(t, r.pool, `SELECT count(*) FROM ledger_presentment`), "only the presented order has one")
	require.Equal(t, 11000, pgtest.Count(t, r.pool, `SELECT amount_minor FROM ledger_transaction WHERE envelope_id = $1`, presented))
}

// A handler's error in a batch runs the same batch again with a savepoint
// per envelope (two transactions, one committed), not a transaction per
// envelope: the answers would be the same, the batching silently lost.
func TestAHandlerErrorInABatchReRunsTheBatchNotEachEnvelope(t *testing.T) {
	t.Parallel()
	r := newBatchRig(t)
	r.registry.Register("standard", "refused", handlers.HandlerFunc(func(context.Context, handlers.Run) (json.RawMessage, error) {
		return nil, handlers.Permanent(errors.New("refused by the test"))
	}))
	ids := payments(t, r, 5, "iso")
	bad := r.insert(t, "standard", "refused", "refused", []byte(`{}`))
	all := append(ids, bad)
	verdicts := r.batch(t, all)
	for i, ch := range verdicts {
		err := verdict(t, ch)
		if all[i] == bad {
			var cancel *river.JobCancelError
			require.ErrorAs(t, err, &cancel)
			continue
		}
		require.NoError(t, err)
	}
	require.Equal(t, envelope.StatusFailed, r.status(t, bad))
	require.Equal(t, 1, r.transactions(t, all), "the batch's second run committed every envelope, the failed one included")
	require.Equal(t, 5, pgtest.Count(t, r.pool, `SELECT count(*) FROM ledger_transaction`))
}

// Two deliveries of one payment in a batch, both at their first attempt:
// the batch's deferred payment statement conflicts on the business key,
// and the batch runs again posting each payment on its own, in one
// transaction, not a transaction per envelope. The payment posts once.
func TestADeferredPostingConflictReRunsTheBatchNotEachEnvelope(t *testing.T) {
	t.Parallel()
	r := newBatchRig(t)
	ids := payments(t, r, 4, "dup")
	again := r.insert(t, "standard", "dup-again", "payment.succeeded", webhooktest.StandardPayment("pay_dup_1", "m_1", 100, "EUR"))
	all := append(ids, again)
	for _, ch := range r.batch(t, all) {
		require.NoError(t, verdict(t, ch))
	}
	for _, id := range all {
		require.Equal(t, envelope.StatusDone, r.status(t, id))
	}
	require.Equal(t, 1, r.transactions(t, all), "one committed transaction for the batch")
	require.Equal(t, 4, pgtest.Count(t, r.pool, `SELECT count(*) FROM ledger_transaction`), "the payment delivered twice posts once")
	require.Equal(t, 1, pgtest.Count(t, r.pool, `SELECT count(*) FROM envelope WHERE id = ANY($1) AND result->>'posted' = 'false'`, all))
}
