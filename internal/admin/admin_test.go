package admin

import (
	"context"
	"crypto/rand"
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
	"github.com/inboxhq/inbox/internal/envelope/envelopetest"
	"github.com/inboxhq/inbox/internal/handlers"
	"github.com/inboxhq/inbox/internal/pgtest"
	"github.com/inboxhq/inbox/internal/webhooktest"
	"github.com/inboxhq/inbox/internal/worker"
)

var discard = slog.New(slog.NewTextHandler(io.Discard, nil))

type bundle struct {
	pool  *pgxpool.Pool
	jobs  *river.Client[pgx.Tx]
	store *envelope.Store
}

func setup(t testing.TB) *bundle {
	t.Helper()
	pool := pgtest.NewPool(t)
	rc, err := envelope.NewInsertClient(pool, discard)
	require.NoError(t, err)
	return &bundle{pool: pool, jobs: rc, store: envelope.NewStore(pool, rc)}
}

// runWorker starts the real worker with the built-in handlers; it stops when
// the test ends.
func (b *bundle) runWorker(t *testing.T) {
	t.Helper()
	client, err := worker.NewClient(b.pool, handlers.Builtin(), worker.Config{
		MaxWorkers:        10,
		FetchCooldown:     5 * time.Millisecond,
		FetchPollInterval: 20 * time.Millisecond,
		// No reconcile: on a loaded machine a drain can outlast its first
		// pass, which would queue a second job for an envelope whose job
		// waits, and these tests count jobs.
		ReconcileEvery: -1,
	}, discard)
	require.NoError(t, err)
	require.NoError(t, client.Start(context.Background()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = client.Stop(ctx)
	})
}

// insert stores a delivery the way ingest does (envelope + job).
func (b *bundle) insert(t testing.TB, prov, deliveryID, eventType string, body []byte) int64 {
	t.Helper()
	res, err := b.store.Insert(context.Background(), envelope.NewDelivery{
		Source: "src", Provider: prov, DeliveryID: deliveryID, EventType: eventType,
		Body: body, Payload: body, Headers: map[string]string{"webhook-signature": "[redacted]"},
	})
	require.NoError(t, err)
	return res.EnvelopeID
}

// seedFailed inserts n failed GitHub push envelopes of source with no River
// jobs, received one second apart ending now, and returns their ids in order.
// The worker records such an envelope as done.
func seedFailed(t testing.TB, pool *pgxpool.Pool, source string, n int) []int64 {
	t.Helper()
	now := time.Now()
	ids := envelopetest.InsertMany(t, pool, n, func(i int) envelopetest.Row {
		g := i + 1
		return envelopetest.Row{Source: source, Provider: "github", DeliveryID: fmt.Sprintf("%s-%d-%s", source, g, rand.Text()), EventType: "push",
			Status: "failed", Body: fmt.Appendf(nil, `{"ref":"refs/heads/b%d","repository":{"full_name":"octo/repo"},"commits":[]}`, g),
			Headers:    map[string]string{"X-Hub-Signature-256": "[redacted]"},
			ReceivedAt: now.Add(-time.Duration(n-g) * time.Second), ProcessedAt: now, Attempts: 1, LastError: "attempts exhausted (1 of 1): seeded"}
	})
	require.Len(t, ids, n)
	return ids
}

func (b *bundle) status(t testing.TB, id int64) string {
	t.Helper()
	var s string
	require.NoError(t, b.pool.QueryRow(context.Background(), `SELECT status FROM envelope WHERE id = $1`, id).Scan(&s))
	return s
}

// waitStatusIs waits up to timeout until envelope id's status is want.
func (b *bundle) waitStatusIs(t *testing.T, timeout time.Duration, what string, id int64, want string) {
	t.Helper()
	pgtest.Eventually(t, timeout, what, func() (bool, string) {
		s := b.status(t, id)
		return s == want, fmt.Sprintf("envelope %d is %s, want %s", id, s, want)
	})
}

// jobsPerEnvelope counts process_envelope jobs per envelope, every state.
func (b *bundle) jobsPerEnvelope(t testing.TB) map[int64]int {
	t.Helper()
	rows, err := b.pool.Query(context.Background(), `
		SELECT (args->>'envelope_id')::bigint, count(*) FROM river_job WHERE kind = 'process_envelope' GROUP BY 1`)
	require.NoError(t, err)
	out := map[int64]int{}
	var id int64
	var n int
	_, err = pgx.ForEachRow(rows, []any{&id, &n}, func() error { out[id] = n; return nil })
	require.NoError(t, err)
	return out
}

func req(f Filter) ReplayRequest {
	return ReplayRequest{Filter: f, Actor: "tester", Reason: "test replay"}
}

func standardPayment(id string) []byte {
	return webhooktest.StandardPayment(id, "m_1", 1234, "USD")
}
