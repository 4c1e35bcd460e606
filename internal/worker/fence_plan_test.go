package worker

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/inboxhq/inbox/internal/envelope"
	"github.com/inboxhq/inbox/internal/pgtest"
	"github.com/inboxhq/inbox/internal/riverjob"
)

// The fence and the job delete read the batch's job rows, not river_job, on
// a connection whose first calls found river_job empty and vacuumed (as it
// is whenever the worker is idle, its jobs deleted), after a peak left a
// backlog of jobs that nothing analyzed, and for as long as the connection
// lives (the envelope side: envelope's
// TestBatchStatementsReadTheBatchNotTheBacklog). A plan cached from the first
// calls is a sequential scan of river_job, at every batch.
func TestFenceReadsTheBatchNotTheBacklog(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	_, err := pool.Exec(ctx, `VACUUM river_job`)
	require.NoError(t, err)
	c, err := pool.Acquire(ctx)
	require.NoError(t, err)
	defer c.Release()
	conn := c.Conn()

	// batch fences jobs ids at attempt 1 and deletes them, in one
	// transaction, and returns how many rows and index entries of river_job
	// it read.
	batch := func(ids []int64, running bool) int64 {
		t.Helper()
		return pgtest.ReadIn(t, conn, func(tx pgx.Tx) {
			atts := make([]*attempt, len(ids))
			for i, id := range ids {
				atts[i] = &attempt{job: &river.Job[envelope.ProcessArgs]{JobRow: &rivertype.JobRow{ID: id, Attempt: 1}}}
			}
			require.NoError(t, fence(ctx, tx, atts))
			for _, a := range atts {
				require.Equal(t, !running, a.settled(), "job %d", a.job.ID)
			}
			deleted, err := riverjob.DeleteRunning(ctx, tx, ids)
			require.NoError(t, err)
			if running {
				require.Len(t, deleted, len(ids))
			}
		}, "river_job")
	}

	// The connection's first calls, on an empty river_job.
	for range 8 {
		batch([]int64{1, 2}, false)
	}

	// A peak leaves 50,000 jobs running.
	const backlog = 50_000
	_, err = pool.Exec(ctx, `
		INSERT INTO river_job (kind, args, state, attempt, attempted_at)
		SELECT 'process_envelope', jsonb_build_object('envelope_id', g), 'running', 1, now()
		  FROM generate_series(1, $1) g`, backlog)
	require.NoError(t, err)
	require.Zero(t, pgtest.Count(t, pool, `SELECT count(*) FROM pg_stats WHERE tablename = 'river_job'`), "river_job has no statistics")

	// Batches of 60: the fence and the delete each read the batch's
	// entries of the primary key, and its rows.
	const size = 60
	for n := range 25 {
		ids := pgtest.Scalar[[]int64](t, pool, `SELECT array_agg(id ORDER BY id) FROM (SELECT id FROM river_job ORDER BY id LIMIT $1) x`, size)
		read := batch(ids, true)
		require.GreaterOrEqual(t, read, int64(2*size), "the batch's entries of the primary key are counted, for each statement")
		require.LessOrEqual(t, read, int64(3*size), "batch %d read %d rows and index entries of river_job, with %d jobs", n, read, backlog-n*size)
	}
	require.Equal(t, backlog-25*size, pgtest.Count(t, pool, `SELECT count(*) FROM river_job`))
}
