package worker_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/inboxhq/inbox/internal/envelope/envelopetest"
	"github.com/inboxhq/inbox/internal/pgtest"
	"github.com/inboxhq/inbox/internal/webhooktest"
	"github.com/inboxhq/inbox/internal/worker"
)

// Two worker processes (clients) share one per-merchant limit kept in
// PostgreSQL; a burst from one merchant does not hold back another.
func TestThrottlePerMerchantAcrossWorkers(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const perSecond = 3
	cfg := worker.Config{
		MaxWorkers:        4,
		FetchCooldown:     5 * time.Millisecond,
		FetchPollInterval: 20 * time.Millisecond,
		Sources:           map[string]worker.SourcePolicy{"src": {ThrottlePerSecond: perSecond}},
		ReconcileEvery:    -1,
	}
	var burst []int64
	for i := range 9 {
		burst = append(burst, b.insert(t, "standard", fmt.Sprintf("msg_a%d", i), "payment.succeeded", webhooktest.StandardPayment(fmt.Sprintf("pa%d", i), "m_busy", 100, "USD"), 0))
	}
	var quiet []int64
	for i := range 2 {
		quiet = append(quiet, b.insert(t, "standard", fmt.Sprintf("msg_b%d", i), "payment.succeeded", webhooktest.StandardPayment(fmt.Sprintf("pb%d", i), "m_quiet", 100, "USD"), 0))
	}
	for range 2 {
		c, err := worker.NewClient(b.worker, b.registry, cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
		require.NoError(t, err)
		require.NoError(t, c.Start(context.Background()))
		t.Cleanup(func() { _ = c.Stop(context.Background()) })
	}
	for _, id := range append(burst, quiet...) {
		b.waitFinal(t, id)
	}
	var span float64
	var maxPerSecond int
	require.NoError(t, b.pool.QueryRow(context.Background(), `
		SELECT extract(epoch FROM max(processed_at) - min(processed_at))::float8
		  FROM envelope WHERE id = ANY($1)`, burst).Scan(&span))
	require.NoError(t, b.pool.QueryRow(context.Background(), `
		SELECT max(n) FROM (SELECT count(*) AS n FROM envelope_attempt
		  WHERE envelope_id = ANY($1) AND outcome = 'done' GROUP BY date_trunc('second', started_at)) x`, burst).Scan(&maxPerSecond))
	// 9 envelopes at 3/s need three one-second windows, so the first and
	// the last are at least a second apart (unthrottled: ~0.1 s).
	require.GreaterOrEqual(t, span, 1.0, "the burst was not throttled")
	require.LessOrEqual(t, maxPerSecond, perSecond+1, "more than the limit in one second")
	// The quiet merchant is done before the busy one's third window (a
	// source-wide limit would have queued it behind the whole burst, into a
	// fourth window; a second of slack absorbs a loaded machine).
	var quietDone, thirdWindow time.Time
	require.NoError(t, b.pool.QueryRow(context.Background(), `SELECT max(processed_at) FROM envelope WHERE id = ANY($1)`, quiet).Scan(&quietDone))
	require.NoError(t, b.pool.QueryRow(context.Background(), `SELECT processed_at FROM envelope WHERE id = ANY($1) ORDER BY processed_at OFFSET $2 LIMIT 1`, burst, 2*perSecond).Scan(&thirdWindow))
	require.True(t, quietDone.Before(thirdWindow), "the quiet merchant waited for the busy one")
	// Every throttled wait is on the audit trail.
	require.Positive(t, pgtest.Count(t, b.pool, `SELECT count(*) FROM envelope_attempt WHERE envelope_id = ANY($1) AND outcome = 'snoozed' AND error LIKE 'throttled: src/m_busy is over 3/s%'`, burst))
	require.Zero(t, pgtest.Count(t, b.pool, `SELECT count(*) FROM envelope_attempt WHERE envelope_id = ANY($1) AND outcome = 'snoozed' AND cause IS DISTINCT FROM 'throttled'`, burst), "a throttled wait's cause is throttled")
	require.Zero(t, pgtest.Count(t, b.pool, `SELECT count(*) FROM envelope_attempt WHERE envelope_id = ANY($1) AND outcome = 'snoozed'`, quiet))
	require.Equal(t, 9, pgtest.Count(t, b.pool, "SELECT count(*) FROM ledger_transaction WHERE merchant = 'm_busy'"))
}

func TestReconcileFailsEnvelopeWhoseJobWasCancelled(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	cancelled := b.insert(t, "github", "gh-cancelled", "push", webhooktest.GitHubPush("refs/heads/main"), 0)
	_, err := b.pool.Exec(ctx, `UPDATE river_job SET state = 'cancelled', finalized_at = now() WHERE (args->>'envelope_id')::bigint = $1`, cancelled)
	require.NoError(t, err)
	// An envelope with no job at all (should never happen).
	orphan := envelopetest.Insert(t, b.pool, envelopetest.Row{Provider: "github", DeliveryID: "gh-orphan", EventType: "push"})
	healthy := b.insert(t, "github", "gh-healthy", "push", webhooktest.GitHubPush("refs/heads/main"), 0)

	failed, enqueued, err := worker.Reconcile(ctx, b.worker, 0)
	require.NoError(t, err)
	require.Equal(t, [2]int{1, 1}, [2]int{failed, enqueued})
	require.Equal(t, 1, pgtest.Count(t, b.pool, `SELECT count(*) FROM envelope WHERE id = $1 AND status = 'failed' AND last_error LIKE '%cancelled%without a recorded outcome%' AND last_cause = 'orphaned'`, cancelled))
	require.Equal(t, 1, pgtest.Count(t, b.pool, `SELECT count(*) FROM river_job WHERE (args->>'envelope_id')::bigint = $1 AND state = 'available'`, orphan))
	require.Equal(t, 1, pgtest.Count(t, b.pool, `SELECT count(*) FROM river_job WHERE (args->>'envelope_id')::bigint = $1`, healthy))
	// Safe to run again: nothing left to do.
	failed, enqueued, err = worker.Reconcile(ctx, b.worker, 0)
	require.NoError(t, err)
	require.Equal(t, [2]int{0, 0}, [2]int{failed, enqueued})
}

// The periodic reconcile also folds the envelope counters' deltas (one row
// per statement that changed envelopes) into one row per source and kind,
// under the worker's role, without changing a count.
func TestReconcileCompactsTheEnvelopeCounts(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	for i := range 6 {
		b.insert(t, "github", fmt.Sprintf("gh-%d", i), "push", webhooktest.GitHubPush("refs/heads/main"), 0)
	}
	_, err := b.pool.Exec(ctx, `UPDATE envelope SET status = 'done', processed_at = now() WHERE delivery_id IN ('gh-0', 'gh-1')`)
	require.NoError(t, err)
	// Deltas are per stored second: the update writes one pending and one
	// done delta for each second its two envelopes were stored in (one, or
	// two when the inserts straddled a second).
	seconds := pgtest.Count(t, b.pool, `SELECT count(DISTINCT envelope_count_bucket(id)) FROM envelope WHERE delivery_id IN ('gh-0', 'gh-1')`)
	require.Equal(t, 6+2*seconds, pgtest.Count(t, b.pool, `SELECT count(*) FROM envelope_count`), "six inserts and one update (two deltas a second)")

	w := &worker.ReconcileWorker{Pool: b.worker, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Grace: time.Minute}
	require.NoError(t, w.Work(ctx, &river.Job[worker.ReconcileArgs]{}))
	require.Equal(t, 2, pgtest.Count(t, b.pool, `SELECT count(*) FROM envelope_count`), "one row per kind")
	require.Equal(t, 4, pgtest.Count(t, b.pool, `SELECT n FROM envelope_count WHERE kind = 'pending'`))
	require.Equal(t, 2, pgtest.Count(t, b.pool, `SELECT n FROM envelope_count WHERE kind = 'done'`))
}
