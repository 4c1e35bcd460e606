package ingest_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/inboxhq/inbox/internal/handlers"
	"github.com/inboxhq/inbox/internal/ingest"
	"github.com/inboxhq/inbox/internal/pgtest"
	"github.com/inboxhq/inbox/internal/provider"
	"github.com/inboxhq/inbox/internal/worker"
)

// startWorker runs a real worker on pool until the test ends.
func startWorker(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	client, err := worker.NewClient(pool, handlers.Builtin(), worker.Config{
		MaxWorkers: 2, FetchCooldown: 5 * time.Millisecond, FetchPollInterval: 20 * time.Millisecond, ReconcileEvery: -1,
	}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	require.NoError(t, err)
	require.NoError(t, client.Start(context.Background()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = client.Stop(ctx)
	})
}

// waitStatus waits until envelope id has status want.
func (b *bundle) waitStatus(t *testing.T, id int64, want string) {
	t.Helper()
	pgtest.Eventually(t, 20*time.Second, fmt.Sprintf("envelope %d to be %s", id, want), func() (bool, string) {
		var status string
		require.NoError(t, b.pool.QueryRow(context.Background(), `SELECT status FROM envelope WHERE id = $1`, id).Scan(&status))
		return status == want, fmt.Sprintf("envelope %d is %s, want %s", id, status, want)
	})
}

// The envelope and its River job are one transaction: when the job's insert
// stalls (river_job locked, as a busy or wedged database would), ingest
// answers 503 and stores nothing, and the sender's retry is a fresh 202 whose
// envelope a worker processes. Fails if the job is enqueued after the
// envelope commits: the envelope would be stored without a job and the
// retry answered "200 duplicate" for an envelope never processed.
func TestStalledEnqueueIs503AndTheRetryIsProcessed(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	b := serve(t, pool, ingest.Options{StoreTimeout: 2 * time.Second})
	ctx := context.Background()
	tx := pgtest.Tx(t, pool)
	_, err := tx.Exec(ctx, "LOCK TABLE river_job IN ACCESS EXCLUSIVE MODE")
	require.NoError(t, err)

	source, d := sample(provider.Standard, "msg_stalled_enqueue")
	r := b.send(t, source, d)
	require.NoError(t, tx.Rollback(ctx))
	require.Equal(t, http.StatusServiceUnavailable, r.code, r.raw)
	require.NotEmpty(t, r.header.Get("Retry-After"))
	env, jobs, _ := b.stored(t)
	require.Equal(t, [2]int{0, 0}, [2]int{env, jobs}, "nothing stored when the enqueue did not commit")

	// The sender retries once the database answers again.
	d.SignedAt = time.Now()
	r = b.send(t, source, d)
	require.Equal(t, http.StatusAccepted, r.code, r.raw)
	require.Equal(t, "accepted", r.Status)
	require.Equal(t, 1, pgtest.Count(t, b.pool, `SELECT count(*) FROM river_job WHERE kind = 'process_envelope' AND (args->>'envelope_id')::bigint = $1`, r.EnvelopeID))
	startWorker(t, pool)
	b.waitStatus(t, r.EnvelopeID, "done")
	require.Equal(t, 1, pgtest.Count(t, b.pool, `SELECT count(*) FROM ledger_transaction WHERE envelope_id = $1`, r.EnvelopeID))
}

// When the transaction fails at COMMIT, after both the envelope and its job
// were written (a deferred trigger raising a serialization failure, which is
// retryable), ingest answers 503 and neither row exists. Fails if the job is
// inserted through the pool instead of the envelope's transaction: the job
// would survive without its envelope.
func TestFailedCommitIs503AndLeavesNoJob(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	_, err := b.pool.Exec(ctx, `
		CREATE FUNCTION test_fail_commit() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			IF NEW.delivery_id = 'msg_failed_commit' AND NOT EXISTS (SELECT 1 FROM test_commit_ok) THEN
				RAISE EXCEPTION 'test: commit refused' USING ERRCODE = 'serialization_failure';
			END IF;
			RETURN NULL;
		END $$;
		CREATE TABLE test_commit_ok ();
		CREATE CONSTRAINT TRIGGER test_fail_commit AFTER INSERT ON envelope
			DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION test_fail_commit();`)
	require.NoError(t, err)

	source, d := sample(provider.Standard, "msg_failed_commit")
	r := b.send(t, source, d)
	require.Equal(t, http.StatusServiceUnavailable, r.code, r.raw)
	require.NotEmpty(t, r.header.Get("Retry-After"))
	env, jobs, _ := b.stored(t)
	require.Equal(t, [2]int{0, 0}, [2]int{env, jobs}, "nothing stored when the commit failed")

	_, err = b.pool.Exec(ctx, `INSERT INTO test_commit_ok DEFAULT VALUES`)
	require.NoError(t, err)
	d.SignedAt = time.Now()
	r = b.send(t, source, d)
	require.Equal(t, http.StatusAccepted, r.code, r.raw)
	env, jobs, _ = b.stored(t)
	require.Equal(t, [2]int{1, 1}, [2]int{env, jobs})
}
