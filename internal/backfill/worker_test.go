package backfill_test

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/inboxhq/inbox/internal/backfill"
	"github.com/inboxhq/inbox/internal/config"
	"github.com/inboxhq/inbox/internal/envelope"
	"github.com/inboxhq/inbox/internal/pg"
	"github.com/inboxhq/inbox/internal/pgtest"
)

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

	var dbURL string
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT current_database()`).Scan(&dbURL))
	workerPool, err := pg.Open(ctx, pgtest.RoleURL(t, pgtest.WithDatabase(pgtest.ServerURL(), dbURL), pgtest.RoleWorker), pg.Options{MaxConns: 6})
	require.NoError(t, err)
	t.Cleanup(workerPool.Close)
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	inserts, err := envelope.NewInsertClient(workerPool, logger)
	require.NoError(t, err)

	type observed struct {
		source, result string
		found, stored  int
	}
	var mu sync.Mutex
	var seen []observed
	done := make(chan struct{}, 1)
	w := &backfill.ReconcileWorker{
		Runner: &backfill.Runner{Store: envelope.NewStore(workerPool, inserts), Client: b.runner.Client},
		Config: b.cfg,
		ObserveFunc: func(source, result string, found, stored int, _ time.Time) {
			mu.Lock()
			seen = append(seen, observed{source, result, found, stored})
			mu.Unlock()
			done <- struct{}{}
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
	_, err = client.Insert(ctx, backfill.ReconcileArgs{Source: "stripe"}, nil)
	require.NoError(t, err)
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the reconcile job did not run")
	}
	mu.Lock()
	require.Equal(t, []observed{{"stripe", "done", 5, 5}}, seen)
	mu.Unlock()
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
    backfill: {api_key: sk_test_a, every: 1h, window: 90h}
  b:
    provider: stripe
    secrets: ["whsec_b_secret_0123456789abcdef"]
    backfill: {api_key: sk_test_b}
  c:
    provider: github
    secrets: ["github-secret-0123456789abcdef"]
`), nil)
	require.NoError(t, err)
	require.Equal(t, []string{"a"}, backfill.ReconciledSources(cfg))
	require.Len(t, backfill.PeriodicJobs(cfg), 1)
	require.Equal(t, 90*time.Hour, backfill.Window(cfg.Sources["a"]))
	require.Equal(t, 80*time.Hour, backfill.Window(cfg.Sources["b"]))
}
