package backfill_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/inboxhq/inbox/internal/backfill"
	"github.com/inboxhq/inbox/internal/backfill/backfillspec"
	"github.com/inboxhq/inbox/internal/config"
	"github.com/inboxhq/inbox/internal/envelope"
	"github.com/inboxhq/inbox/internal/pg"
	"github.com/inboxhq/inbox/internal/pgtest"
)

type observed struct {
	source, result string
	found, stored  int
}

// startReconciler runs a River client with the reconcile worker, as the
// worker role, on b's database; each run's result goes to the channel.
func startReconciler(t *testing.T, b *bundle) (*river.Client[pgx.Tx], <-chan observed) {
	t.Helper()
	ctx := context.Background()
	var name string
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT current_database()`).Scan(&name))
	workerPool, err := pg.Open(ctx, pgtest.RoleURL(t, pgtest.WithDatabase(pgtest.ServerURL(), name), pgtest.RoleWorker), pg.Options{MaxConns: 6})
	require.NoError(t, err)
	t.Cleanup(workerPool.Close)
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	inserts, err := envelope.NewInsertClient(workerPool, logger)
	require.NoError(t, err)
	results := make(chan observed, 10)
	w := &backfill.ReconcileWorker{
		Runner: &backfill.Runner{Store: envelope.NewStore(workerPool, inserts), Client: b.runner.Client},
		Config: b.cfg,
		ObserveFunc: func(source, result string, found, stored, _ int, _ time.Time) {
			results <- observed{source, result, found, stored}
		},
	}
	workers := river.NewWorkers()
	river.AddWorker(workers, w)
	client, err := river.NewClient(riverpgxv5.New(workerPool), &river.Config{
		Logger: logger, Workers: workers, Queues: map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 1}},
		FetchCooldown: 10 * time.Millisecond, FetchPollInterval: 20 * time.Millisecond,
	})
	require.NoError(t, err)
	require.NoError(t, client.Start(ctx))
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = client.Stop(sctx)
	})
	return client, results
}

func nextResult(t *testing.T, results <-chan observed) observed {
	t.Helper()
	select {
	case r := <-results:
		return r
	case <-time.After(30 * time.Second):
		t.Fatal("no reconcile run finished")
		return observed{}
	}
}

// The reconcile job, run by a real River client as the worker role,
// backfills the source's window (default 80 h for Stripe: events older are
// not asked for), records a run by "reconcile", and reports its result.
func TestReconcileJobBackfillsTheWindow(t *testing.T) {
	t.Parallel()
	now := time.Now()
	events := append(stripeEvents(1, "young", now.Add(-time.Minute)), stripeEvents(5, "rec", now.Add(-time.Hour))...)
	fake := newFakeStripe(t, events)
	b := setup(t, fake.srv.URL, "")
	ctx := context.Background()

	client, results := startReconciler(t, b)
	_, err := client.Insert(ctx, backfill.ReconcileArgs{Source: "stripe"}, nil)
	require.NoError(t, err)
	require.Equal(t, observed{"stripe", "done", 5, 5}, nextResult(t, results))
	envs := b.envelopes(t, "stripe")
	require.Len(t, envs, 5)
	var actor string
	var since, until time.Time
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT actor, since, until FROM backfill_run`).Scan(&actor, &since, &until))
	require.Equal(t, backfill.ReconcileActor, actor)
	require.InDelta(t, (80*time.Hour - 15*time.Minute).Seconds(), until.Sub(since).Seconds(), 1, "Stripe's 72 h retry window + 8 h, up to 15 minutes ago")
	require.WithinDuration(t, time.Now().Add(-15*time.Minute), until, time.Minute)
	req := fake.requests()[0]
	require.Equal(t, since.Unix(), mustInt(t, req.Query.Get("created[gte]")))
}

// Only sources whose backfill sets every get a periodic reconcile.
func TestPeriodicJobsOnlyForSourcesThatAskForOne(t *testing.T) {
	t.Parallel()
	cfg, err := config.Parse([]byte(`
sources:
  a:
    provider: stripe
    secrets: ["whsec_a_secret_0123456789abcdef"]
    account_id: acct_a
    backfill: {api_key: sk_test_a, every: 1h, window: 90h}
  b:
    provider: stripe
    secrets: ["whsec_b_secret_0123456789abcdef"]
    account_id: acct_b
    backfill: {api_key: sk_test_b}
  c:
    provider: github
    secrets: ["github-secret-0123456789abcdef"]
`), nil)
	require.NoError(t, err)
	require.Equal(t, []string{"a"}, backfill.ReconciledSources(cfg))
	require.Len(t, backfill.PeriodicJobs(cfg), 1)
	require.Equal(t, 90*time.Hour, backfill.Window(cfg.Sources["a"]))
	// The reconcile's timeout is the source's (default 50s), not the
	// processing job timeout.
	w := &backfill.ReconcileWorker{Config: cfg, JobTimeout: time.Minute}
	require.Equal(t, backfillspec.DefaultReconcileTimeout, w.Timeout(&river.Job[backfill.ReconcileArgs]{Args: backfill.ReconcileArgs{Source: "a"}}))
	cfg.Sources["a"].Backfill.Timeout = 30 * time.Minute
	require.Equal(t, 30*time.Minute, w.Timeout(&river.Job[backfill.ReconcileArgs]{Args: backfill.ReconcileArgs{Source: "a"}}))
	require.Equal(t, 30*time.Minute, backfill.MaxTimeout(cfg))
	require.Equal(t, 80*time.Hour, backfill.Window(cfg.Sources["b"]))
}

// A reconcile attempt that fails midway (Stripe answering 503 past the
// retries) is retried by River, and the retry carries on with the same run
// from its cursor: one run row, done, every event stored once, the first
// page not asked for again.
func TestReconcileRetryResumesItsRun(t *testing.T) {
	t.Parallel()
	now := time.Now()
	events := stripeEvents(150, "rr", now.Add(-time.Hour))
	fake := newFakeStripe(t, events)
	var mu sync.Mutex
	failures := 0
	fake.FaultFunc = func(n int, q url.Values, w http.ResponseWriter) bool {
		mu.Lock()
		defer mu.Unlock()
		if q.Get("starting_after") != "" && failures < 4 { // 1 + MaxRetries: the first attempt gives up
			failures++
			stripeError(w, http.StatusServiceUnavailable, "api_error", "The server is temporarily unavailable.")
			return true
		}
		return false
	}
	b := setup(t, fake.srv.URL, "")
	client, results := startReconciler(t, b)
	_, err := client.Insert(context.Background(), backfill.ReconcileArgs{Source: "stripe"}, nil)
	require.NoError(t, err)
	require.Equal(t, observed{"stripe", "failed", 100, 100}, nextResult(t, results))
	require.Equal(t, observed{"stripe", "done", 50, 50}, nextResult(t, results), "the retry's own counts: the first attempt's 100 were observed already")
	require.Len(t, b.envelopes(t, "stripe"), 150)
	require.Equal(t, 1, pgtest.Count(t, b.pool, `SELECT count(*) FROM backfill_run`))
	firstPages := 0
	for _, r := range fake.requests() {
		if r.Query.Get("starting_after") == "" {
			firstPages++
		}
	}
	require.Equal(t, 1, firstPages, "the retry resumed from the cursor")
}
