package worker_test

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/inboxhq/inbox/internal/config"
	"github.com/inboxhq/inbox/internal/envelope"
	"github.com/inboxhq/inbox/internal/forward"
	"github.com/inboxhq/inbox/internal/handlers"
	"github.com/inboxhq/inbox/internal/pgtest"
	"github.com/inboxhq/inbox/internal/testlog"
	"github.com/inboxhq/inbox/internal/webhooktest"
	"github.com/inboxhq/inbox/internal/worker"
)

// fastRetry retries after 10 ms, so retry tests need no real backoff.
type fastRetry struct{}

func (fastRetry) NextRetry(*rivertype.JobRow) time.Time { return time.Now().Add(10 * time.Millisecond) }

type bundle struct {
	pool     *pgxpool.Pool
	store    *envelope.Store
	registry *handlers.Registry
	// router, when set, is what the worker routes with (registry
	// decorated, for forwarding); else registry.
	router handlers.Router
	// worker is logged in as a member of inbox_worker only: workers and
	// reconcile run with the worker's privileges; pool (the owner's) seeds
	// and checks.
	worker *pgxpool.Pool
	// logs holds what the worker clients run by runConfig logged.
	logs testlog.Buffer
}

func setup(t testing.TB) *bundle {
	t.Helper()
	url := pgtest.NewURL(t)
	pool, err := pgxpool.New(context.Background(), url)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	wcfg, err := pgxpool.ParseConfig(pgtest.RoleURL(t, url, pgtest.RoleWorker))
	require.NoError(t, err)
	wcfg.MaxConns = int32(worker.PoolSize(worker.DefaultBatching)) // as worker run sizes it
	wp, err := pgxpool.NewWithConfig(context.Background(), wcfg)
	require.NoError(t, err)
	t.Cleanup(wp.Close)
	rc, err := envelope.NewInsertClient(pool, slog.New(slog.NewTextHandler(io.Discard, nil)))
	require.NoError(t, err)
	return &bundle{pool: pool, store: envelope.NewStore(pool, rc), registry: handlers.Builtin(), worker: wp}
}

// run starts a worker client; it stops when the test ends.
func (b *bundle) run(t *testing.T, policy worker.Policy) *river.Client[pgx.Tx] {
	t.Helper()
	return b.runConfig(t, worker.Config{Policy: policy})
}

// runConfig starts a worker client with cfg, its zero fields filled with
// the tests' fast defaults (4 workers, 5 ms fetch cooldown, 20 ms poll,
// retries after 10 ms); it stops when the test ends.
func (b *bundle) runConfig(t *testing.T, cfg worker.Config) *river.Client[pgx.Tx] {
	t.Helper()
	cfg.MaxWorkers = cmp.Or(cfg.MaxWorkers, 4)
	cfg.FetchCooldown = cmp.Or(cfg.FetchCooldown, 5*time.Millisecond)
	cfg.FetchPollInterval = cmp.Or(cfg.FetchPollInterval, 20*time.Millisecond)
	if cfg.RetryPolicy == nil {
		cfg.RetryPolicy = fastRetry{}
	}
	var router handlers.Router = b.registry
	if b.router != nil {
		router = b.router
	}
	client, err := worker.NewClient(b.worker, router, cfg, slog.New(slog.NewTextHandler(&b.logs, nil)))
	require.NoError(t, err)
	require.NoError(t, client.Start(context.Background()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = client.Stop(ctx)
	})
	return client
}

func (b *bundle) insert(t *testing.T, prov, deliveryID, eventType string, body []byte, maxAttempts int) int64 {
	t.Helper()
	res, err := b.store.Insert(context.Background(), envelope.NewDelivery{
		Source: "src", Provider: prov, DeliveryID: deliveryID, EventType: eventType,
		Body: body, Payload: body, Headers: map[string]string{}, MaxAttempts: maxAttempts,
	})
	require.NoError(t, err)
	return res.EnvelopeID
}

// waitFinal waits for the envelope to leave pending and returns it.
func (b *bundle) waitFinal(t *testing.T, id int64) *envelope.Envelope {
	t.Helper()
	var e *envelope.Envelope
	pgtest.Eventually(t, 20*time.Second, fmt.Sprintf("envelope %d to leave pending", id), func() (bool, string) {
		var err error
		e, err = envelope.Get(context.Background(), b.pool, id)
		require.NoError(t, err)
		return e.Status != envelope.StatusPending, fmt.Sprintf("still pending (attempts %d, last error %v)", e.Attempts, e.LastError)
	})
	return e
}

// jobDeleted is jobState's answer for a job whose row is gone: the worker
// deletes the job of an envelope it finished done or ignored in the
// finishing transaction (riverjob.DeleteRunning).
const jobDeleted = "deleted"

// jobState waits until the envelope's job reaches a final state and returns
// it (jobDeleted once its row is gone; the attempt is then 0).
func (b *bundle) jobState(t *testing.T, id int64) (string, int) {
	t.Helper()
	var state string
	var attempt int
	pgtest.Eventually(t, 20*time.Second, fmt.Sprintf("the job of envelope %d to finish", id), func() (bool, string) {
		err := b.pool.QueryRow(context.Background(), `SELECT state::text, attempt FROM river_job WHERE (args->>'envelope_id')::bigint = $1 ORDER BY id DESC LIMIT 1`, id).Scan(&state, &attempt)
		if errors.Is(err, pgx.ErrNoRows) {
			state, attempt, err = jobDeleted, 0, nil
		}
		require.NoError(t, err)
		switch state {
		case jobDeleted, "cancelled", "discarded":
			return true, ""
		}
		return false, "still " + state
	})
	return state, attempt
}

func (b *bundle) outcomes(t *testing.T, id int64) []string {
	t.Helper()
	rows, err := b.pool.Query(context.Background(), `SELECT outcome FROM envelope_attempt WHERE envelope_id = $1 ORDER BY id`, id)
	require.NoError(t, err)
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return out
}

// causes returns the envelope's attempts' causes in order, "" for none.
func (b *bundle) causes(t *testing.T, id int64) []string {
	t.Helper()
	rows, err := b.pool.Query(context.Background(), `SELECT coalesce(cause, '') FROM envelope_attempt WHERE envelope_id = $1 ORDER BY id`, id)
	require.NoError(t, err)
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return out
}

// lastCause returns envelope.last_cause, "" for NULL.
func (b *bundle) lastCause(t *testing.T, id int64) string {
	t.Helper()
	var c string
	require.NoError(t, b.pool.QueryRow(context.Background(), `SELECT coalesce(last_cause, '') FROM envelope WHERE id = $1`, id).Scan(&c))
	return c
}

func TestDoneWritesLedgerResultAttemptAndDeletesJob(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.run(t, worker.Policy{})
	id := b.insert(t, "standard", "msg_1", "payment.succeeded", webhooktest.StandardPayment("pay_1", "m_1", 1234, "USD"), 0)
	e := b.waitFinal(t, id)
	require.Equal(t, envelope.StatusDone, e.Status)
	require.NotNil(t, e.ProcessedAt)
	require.Equal(t, 1, e.Attempts)
	var res map[string]any
	require.NoError(t, json.Unmarshal(e.Result, &res))
	require.Equal(t, true, res["posted"])
	require.Equal(t, []string{"done"}, b.outcomes(t, id))
	state, _ := b.jobState(t, id)
	require.Equal(t, jobDeleted, state)
	require.Equal(t, 1, pgtest.Count(t, b.pool, "SELECT count(*) FROM ledger_transaction WHERE envelope_id = $1", id))
	require.Equal(t, 1234, pgtest.Count(t, b.pool, "SELECT balance_minor FROM ledger_balance WHERE merchant = 'm_1' AND account = 'psp_clearing'"))
}

func TestNoHandlerIgnores(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.run(t, worker.Policy{})
	id := b.insert(t, "stripe", "evt_x", "customer.created", webhooktest.StripeEvent("evt_x", "customer.created", `{"id":"cus_1"}`), 0)
	e := b.waitFinal(t, id)
	require.Equal(t, envelope.StatusIgnored, e.Status)
	require.Contains(t, string(e.Result), "no handler")
	require.Equal(t, []string{"ignored"}, b.outcomes(t, id))
	state, _ := b.jobState(t, id)
	require.Equal(t, jobDeleted, state)
	require.Equal(t, 0, pgtest.Count(t, b.pool, "SELECT count(*) FROM ledger_transaction"))
}

func TestPermanentErrorFailsAndCancels(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.run(t, worker.Policy{})
	id := b.insert(t, "standard", "msg_bad", "payment.succeeded", []byte(`{"type":"payment.succeeded","data":{"payment_id":"p","merchant_id":"m","amount_minor":100,"currency":"XYZ"}}`), 0)
	e := b.waitFinal(t, id)
	require.Equal(t, envelope.StatusFailed, e.Status)
	require.NotNil(t, e.LastError)
	require.Contains(t, *e.LastError, "permanent")
	require.Equal(t, []string{"failed"}, b.outcomes(t, id))
	require.Equal(t, []string{"unknown_currency"}, b.causes(t, id))
	require.Equal(t, "unknown_currency", b.lastCause(t, id))
	state, attempt := b.jobState(t, id)
	require.Equal(t, "cancelled", state)
	require.Equal(t, 1, attempt)
	require.Equal(t, 0, pgtest.Count(t, b.pool, "SELECT count(*) FROM ledger_entry"))
}

// flaky fails its first n calls with a transient error, after writing a
// ledger posting that must be rolled back each time.
func flaky(n int32, calls *atomic.Int32) handlers.Handler {
	inner, _ := handlers.Builtin().Lookup("standard", "payment.succeeded")
	return handlers.HandlerFunc(func(ctx context.Context, run handlers.Run) (json.RawMessage, error) {
		res, err := inner.Handle(ctx, run)
		if err != nil {
			return nil, err
		}
		if c := calls.Add(1); c <= n {
			return nil, fmt.Errorf("downstream hiccup %d", c)
		}
		return res, nil
	})
}

func TestRetryThenSuccessPostsOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var calls atomic.Int32
	b.registry.Register("standard", "payment.succeeded", flaky(2, &calls))
	b.run(t, worker.Policy{})
	id := b.insert(t, "standard", "msg_flaky", "payment.succeeded", webhooktest.StandardPayment("pay_f", "m_f", 700, "EUR"), 5)
	e := b.waitFinal(t, id)
	require.Equal(t, envelope.StatusDone, e.Status)
	require.Equal(t, 3, e.Attempts)
	require.Equal(t, []string{"retry", "retry", "done"}, b.outcomes(t, id))
	require.Equal(t, 1, pgtest.Count(t, b.pool, "SELECT count(*) FROM ledger_transaction"), "rolled-back attempts post nothing")
	require.Equal(t, 2, pgtest.Count(t, b.pool, "SELECT count(*) FROM envelope_attempt WHERE envelope_id = $1 AND error LIKE 'downstream hiccup%'", id))
	state, _ := b.jobState(t, id)
	require.Equal(t, jobDeleted, state)
	require.Equal(t, 3, pgtest.Count(t, b.pool, "SELECT max(attempt) FROM envelope_attempt WHERE envelope_id = $1 AND outcome = 'done'", id), "done at the job's third attempt")
}

func TestAttemptsExhaustedFails(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var calls atomic.Int32
	b.registry.Register("standard", "payment.succeeded", flaky(100, &calls))
	b.run(t, worker.Policy{})
	id := b.insert(t, "standard", "msg_exhaust", "payment.succeeded", webhooktest.StandardPayment("pay_x", "m_x", 700, "EUR"), 3)
	e := b.waitFinal(t, id)
	require.Equal(t, envelope.StatusFailed, e.Status)
	require.Contains(t, *e.LastError, "attempts exhausted (3 of 3)")
	require.Equal(t, []string{"retry", "retry", "failed"}, b.outcomes(t, id))
	require.Equal(t, []string{"internal", "internal", "internal"}, b.causes(t, id), "the cause is what went wrong; outcome failed says it was the last")
	state, _ := b.jobState(t, id)
	require.Equal(t, "discarded", state)
	require.Equal(t, 0, pgtest.Count(t, b.pool, "SELECT count(*) FROM ledger_transaction"))
}

func TestRefundWaitsForPayment(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.run(t, worker.Policy{SnoozeDefault: 50 * time.Millisecond})
	refund := b.insert(t, "standard", "msg_ref", "payment.refunded", webhooktest.StandardRefund("re_1", "pay_1", "m_1", 300, "USD"), 0)
	// Let the refund snooze at least once before its payment arrives.
	pgtest.Eventually(t, 10*time.Second, "the refund to snooze", func() (bool, string) {
		return pgtest.Count(t, b.pool, "SELECT count(*) FROM envelope_attempt WHERE envelope_id = $1 AND outcome = 'snoozed'", refund) > 0, "refund never snoozed"
	})
	payment := b.insert(t, "standard", "msg_pay", "payment.succeeded", webhooktest.StandardPayment("pay_1", "m_1", 1000, "USD"), 0)
	require.Equal(t, envelope.StatusDone, b.waitFinal(t, payment).Status)
	e := b.waitFinal(t, refund)
	require.Equal(t, envelope.StatusDone, e.Status)
	require.Equal(t, 1, e.Attempts, "a snooze uses no attempt")
	outs := b.outcomes(t, refund)
	require.Equal(t, "done", outs[len(outs)-1])
	state, _ := b.jobState(t, refund)
	require.Equal(t, jobDeleted, state)
	require.Equal(t, 700, pgtest.Count(t, b.pool, "SELECT balance_minor FROM ledger_balance WHERE merchant = 'm_1' AND account = 'psp_clearing'"))
}

func TestSnoozeBoundedByAgeFails(t *testing.T) {
	t.Parallel()
	b := setup(t)
	// The source's own max_age: the provider's retry window (28 h for
	// Standard Webhooks) would otherwise raise the policy's.
	b.runConfig(t, worker.Config{Policy: worker.Policy{SnoozeDefault: 50 * time.Millisecond, MaxAge: 1500 * time.Millisecond},
		Sources: map[string]worker.SourcePolicy{"src": {MaxAge: 1500 * time.Millisecond}}}) // long enough for a first attempt on a loaded machine
	id := b.insert(t, "standard", "msg_orphan", "payment.refunded", webhooktest.StandardRefund("re_o", "pay_never", "m_1", 300, "USD"), 0)
	e := b.waitFinal(t, id)
	require.Equal(t, envelope.StatusFailed, e.Status)
	require.Contains(t, *e.LastError, "gave up waiting")
	outs := b.outcomes(t, id)
	require.Greater(t, len(outs), 1)
	require.Equal(t, "failed", outs[len(outs)-1])
	require.Equal(t, "snoozed", outs[0])
	for _, c := range b.causes(t, id) {
		require.Equal(t, "payment_not_posted", c, "snoozes and the final give-up keep the cause")
	}
	require.Equal(t, "payment_not_posted", b.lastCause(t, id))
	state, _ := b.jobState(t, id)
	require.Equal(t, "cancelled", state)
}

func TestSamePaymentUnderTwoDeliveryIDsPostsOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.run(t, worker.Policy{})
	body := webhooktest.StandardPayment("pay_same", "m_s", 999, "GBP")
	a := b.insert(t, "standard", "msg_a", "payment.succeeded", body, 0)
	c := b.insert(t, "standard", "msg_b", "payment.succeeded", body, 0)
	require.Equal(t, envelope.StatusDone, b.waitFinal(t, a).Status)
	require.Equal(t, envelope.StatusDone, b.waitFinal(t, c).Status)
	require.Equal(t, 1, pgtest.Count(t, b.pool, "SELECT count(*) FROM ledger_transaction"))
	require.Equal(t, 999, pgtest.Count(t, b.pool, "SELECT balance_minor FROM ledger_balance WHERE merchant = 'm_s' AND account = 'psp_clearing'"))
}

func TestHandlerPanicIsRetried(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var calls atomic.Int32
	b.registry.Register("github", "*", handlers.HandlerFunc(func(context.Context, handlers.Run) (json.RawMessage, error) {
		if calls.Add(1) == 1 {
			panic("boom")
		}
		return json.RawMessage(`{"ok":true}`), nil
	}))
	b.run(t, worker.Policy{})
	id := b.insert(t, "github", "gh-1", "push", webhooktest.GitHubPush("refs/heads/main"), 0)
	require.Equal(t, envelope.StatusDone, b.waitFinal(t, id).Status)
	require.Equal(t, []string{"retry", "done"}, b.outcomes(t, id))
	require.Equal(t, []string{"panic", ""}, b.causes(t, id))
	require.Equal(t, "", b.lastCause(t, id), "done clears last_cause")
	// The log keeps where it panicked (the attempt row keeps the message).
	require.Regexp(t, `level=ERROR msg="handler panicked" envelope=\d+ source=\S+ event_type=push panic=boom stack="goroutine \d+ [^"]*worker_test\.go`, b.logs.String())
}

// A worker that lost its job (paused past the rescue horizon, the job
// rescued and re-run by a later attempt) must change nothing when it resumes.
func TestStaleAttemptIsFencedOff(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id := b.insert(t, "standard", "msg_zombie", "payment.succeeded", webhooktest.StandardPayment("pay_z", "m_z", 100, "USD"), 0)
	ctx := context.Background()
	var jobID int64
	// The job is running again, at attempt 2, on another worker.
	require.NoError(t, b.pool.QueryRow(ctx, `UPDATE river_job SET state = 'running', attempt = 2, attempted_at = now() WHERE (args->>'envelope_id')::bigint = $1 RETURNING id`, id).Scan(&jobID))
	w := &worker.ProcessWorker{Pool: b.worker, Registry: b.registry, Policy: worker.DefaultPolicy, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Name: "zombie"}
	stale := &river.Job[envelope.ProcessArgs]{
		JobRow: &rivertype.JobRow{ID: jobID, Attempt: 1, MaxAttempts: 25, State: rivertype.JobStateRunning},
		Args:   envelope.ProcessArgs{EnvelopeID: id},
	}
	err := w.Work(ctx, stale)
	require.Error(t, err)
	require.Contains(t, err.Error(), "lost the job")
	e, err := envelope.Get(ctx, b.pool, id)
	require.NoError(t, err)
	require.Equal(t, envelope.StatusPending, e.Status)
	require.Equal(t, 0, pgtest.Count(t, b.pool, "SELECT count(*) FROM ledger_transaction"))
	require.Equal(t, 0, pgtest.Count(t, b.pool, "SELECT count(*) FROM envelope_attempt"))
}

// A forwarding destination that asks to wait (503 + Retry-After) snoozes the
// envelope, then a 2xx completes it with the response in the result.
func TestForwardRetryAfterThenDone(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 1 {
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		_, _ = io.WriteString(w, `{"received":true}`)
	}))
	t.Cleanup(srv.Close)
	cfg, err := config.Parse([]byte(`
sources:
  src:
    provider: github
    secrets: ["gh-secret-0123456789abcdef"]
    forward:
      - url: `+srv.URL+`/hooks
        secret: whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw
        mode: instead
        timeout: 2s
`), nil)
	require.NoError(t, err)
	b.router, err = forward.FromSources(handlers.Builtin(), cfg.Destinations(), nil)
	require.NoError(t, err)
	b.run(t, worker.Policy{})
	id := b.insert(t, "github", "gh-fwd", "push", webhooktest.GitHubPush("refs/heads/main"), 0)
	e := b.waitFinal(t, id)
	require.Equal(t, envelope.StatusDone, e.Status)
	require.Equal(t, 1, e.Attempts, "a snooze uses no attempt")
	require.Equal(t, []string{"snoozed", "done"}, b.outcomes(t, id))
	require.Equal(t, []string{"retry_after", ""}, b.causes(t, id))
	// The snooze lasted what Retry-After said (1 s), not the default (10 s).
	var gap float64
	require.NoError(t, b.pool.QueryRow(context.Background(), `
		SELECT extract(epoch FROM max(started_at) - min(finished_at))::float8 FROM envelope_attempt WHERE envelope_id = $1`, id).Scan(&gap))
	require.GreaterOrEqual(t, gap, 0.9, "gap between the snoozed and the done attempt")
	require.Less(t, gap, 6.0, "gap between the snoozed and the done attempt (the default snooze is 10 s)")
	require.Contains(t, string(e.Result), `"status": 200`)
	require.Contains(t, string(e.Result), `received`)
	state, _ := b.jobState(t, id)
	require.Equal(t, jobDeleted, state)
	require.EqualValues(t, 2, calls.Load())
}

// A forwarding destination that refuses the delivery (4xx) fails it for good.
func TestForwardClientErrorFailsPermanently(t *testing.T) {
	t.Parallel()
	b := setup(t)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "no such hook", http.StatusNotFound)
	}))
	t.Cleanup(srv.Close)
	cfg, err := config.Parse([]byte(`
sources:
  src:
    provider: github
    secrets: ["gh-secret-0123456789abcdef"]
    forward:
      - url: `+srv.URL+`/hooks
        secret: whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw
`), nil)
	require.NoError(t, err)
	b.router, err = forward.FromSources(handlers.Builtin(), cfg.Destinations(), nil)
	require.NoError(t, err)
	b.run(t, worker.Policy{})
	id := b.insert(t, "github", "gh-fwd-404", "push", webhooktest.GitHubPush("refs/heads/main"), 0)
	e := b.waitFinal(t, id)
	require.Equal(t, envelope.StatusFailed, e.Status)
	require.Contains(t, *e.LastError, "404")
	require.Equal(t, []string{"failed"}, b.outcomes(t, id))
	require.Equal(t, []string{"forward_4xx"}, b.causes(t, id))
	state, _ := b.jobState(t, id)
	require.Equal(t, "cancelled", state)
}
