package worker_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/inboxhq/inbox/internal/pgtest"
	"github.com/inboxhq/inbox/internal/worker"
)

// River's cleaner keeps the rows of the jobs River completes (the periodic
// ones, such as the reconcile here; a processing job is deleted by the
// worker instead) for the configured retention, not River's default day:
// an hour-old completed row goes, a recent one stays.
func TestCompletedJobsAreKeptForTheRetentionOnly(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	var old, recent int64
	for _, r := range []struct {
		id  *int64
		age time.Duration
	}{{&old, 2 * time.Hour}, {&recent, 10 * time.Minute}} {
		require.NoError(t, b.pool.QueryRow(ctx, `
			INSERT INTO river_job (args, kind, max_attempts, queue, state, priority, scheduled_at, attempt, attempted_at, finalized_at)
			VALUES ('{}', 'reconcile_envelopes', 25, 'default', 'completed', 1, now() - $1::interval, 1, now() - $1::interval, now() - $1::interval)
			RETURNING id`, r.age).Scan(r.id))
	}
	b.runConfig(t, worker.Config{CompletedJobRetention: time.Hour, ReconcileEvery: -1})
	pgtest.Eventually(t, 30*time.Second, "the hour-old completed job deleted", func() (bool, string) {
		n := pgtest.Count(t, b.pool, `SELECT count(*) FROM river_job WHERE id = $1`, old)
		return n == 0, fmt.Sprintf("%d rows", n)
	})
	require.Equal(t, 1, pgtest.Count(t, b.pool, `SELECT count(*) FROM river_job WHERE id = $1`, recent), "a completed job younger than the retention is kept")
}

// River's reindexer is given exactly the indexes river_job has after the
// migrations (its default list, less the GIN indexes migration 00194
// dropped): a River upgrade that renames or adds one fails here rather than
// in a nightly reindex.
func TestTheReindexerListMatchesTheSchema(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var have []string
	require.NoError(t, b.pool.QueryRow(context.Background(), `
		SELECT array_agg(indexname::text ORDER BY indexname) FROM pg_indexes
		 WHERE tablename = 'river_job' AND indexname <> 'river_job_envelope_id_idx'`).Scan(&have))
	require.Equal(t, have, worker.ReindexedIndexes())
	require.NotContains(t, have, "river_job_args_index")
	require.NotContains(t, have, "river_job_metadata_index")
}
