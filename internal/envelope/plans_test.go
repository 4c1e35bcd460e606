package envelope_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/inboxhq/inbox/internal/envelope"
	"github.com/inboxhq/inbox/internal/envelope/envelopetest"
	"github.com/inboxhq/inbox/internal/pg"
	"github.com/inboxhq/inbox/internal/pgtest"
)

// The worker's statements on a batch of envelopes (LockMany, Existing,
// FinishMany) read the batch's rows, not the backlog, on a connection that
// made its first calls while the tables were empty, after a peak left a
// backlog in a partition that has no statistics (nothing analyzed it), and
// for as long as the connection lives. A plan cached from the first calls (a
// sequential scan of every partition, or a walk of the status index over
// every pending envelope) reads the whole backlog at each batch; so does the
// generic plan PostgreSQL switches to once the batches' own plans grow more
// expensive than it.
func TestBatchStatementsReadTheBatchNotTheBacklog(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	pgtest.AwayFromMidnight(t, b.pool, time.Minute) // the backlog and its batches in one day's partition
	c, err := b.pool.Acquire(ctx)
	require.NoError(t, err)
	defer c.Release()
	conn := c.Conn()

	// batch runs the three statements in one transaction and returns how
	// many rows of partition part they read (0 without one).
	batch := func(ids []int64, want int, part string) int64 {
		t.Helper()
		tx, err := conn.Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(ctx) }()
		var before int64
		if part != "" {
			before = pgtest.RowsRead(t, tx, part)
		}
		envs, _, err := envelope.LockMany(ctx, tx, ids, true)
		require.NoError(t, err)
		require.Len(t, envs, want)
		_, err = envelope.Existing(ctx, tx, ids)
		require.NoError(t, err)
		recs := make([]envelope.Record, len(ids))
		for i, id := range ids {
			recs[i] = envelope.Record{EnvelopeID: id, Status: envelope.StatusDone, Result: json.RawMessage(`{}`),
				Attempt: envelope.Attempt{Attempt: 1, Outcome: envelope.OutcomeDone, StartedAt: time.Now()}}
		}
		done, err := envelope.FinishMany(ctx, tx, "w", recs)
		require.NoError(t, err)
		require.Len(t, done, want)
		var read int64
		if part != "" {
			read = pgtest.RowsRead(t, tx, part) - before
		}
		require.NoError(t, tx.Commit(ctx))
		return read
	}

	// The connection's first calls, on empty tables.
	for range 8 {
		batch([]int64{1, 2}, 0, "")
	}

	// A peak leaves 50,000 envelopes pending in today's partition.
	const backlog = 50_000
	envelopetest.InsertMany(t, b.pool, backlog, func(int) envelopetest.Row { return envelopetest.Row{} })
	part := pgtest.Scalar[string](t, b.pool, `SELECT tableoid::regclass::text FROM envelope LIMIT 1`)
	require.Equal(t, backlog, pgtest.Count(t, b.pool, `SELECT count(*) FROM `+part), "the backlog is in one partition")
	require.Zero(t, pgtest.Count(t, b.pool, `SELECT count(*) FROM pg_stats WHERE tablename = $1`, part), "and it has no statistics")

	// The worker drains it, 60 at a time: each of the three statements reads
	// the batch's rows, nowhere near the backlog. 25 batches are enough for
	// the connection's custom plans to give way to its generic plan, were
	// the statements prepared.
	const size = 60
	for n := range 25 {
		ids := pgtest.Scalar[[]int64](t, b.pool, `
			SELECT array_agg(id ORDER BY id) FROM (SELECT id FROM envelope WHERE status = 'pending' ORDER BY id LIMIT $1) x`, size)
		read := batch(ids, size, part)
		require.LessOrEqual(t, read, int64(3*size), "batch %d read %d rows of %s, with %d pending", n, read, part, backlog-n*size)
	}
	require.Equal(t, 25*size, pgtest.Count(t, b.pool, `SELECT count(*) FROM envelope WHERE status = 'done'`))

	// And FinishMany's plan holds only the batch's partition: a day's
	// partitions are all large under retention, and a plan over every one
	// would look each id up in each of them.
	ids := pgtest.Scalar[[]int64](t, b.pool, `SELECT array_agg(id) FROM (SELECT id FROM envelope WHERE status = 'pending' LIMIT $1) x`, size)
	n := len(ids)
	tx, err := conn.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }() // before the connection goes back to the pool
	rows, err := tx.Query(ctx, "EXPLAIN "+envelope.FinishManySQL, pg.PlanEachCall, ids, make([]string, n), make([][]byte, n),
		make([]*string, n), make([]int64, n), make([]int32, n), make([]string, n), make([]time.Time, n), "w", make([]*string, n))
	require.NoError(t, err)
	plan, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	var updated []string
	for _, line := range plan {
		if rel, ok := strings.CutPrefix(strings.TrimSpace(line), "Update on "); ok {
			updated = append(updated, strings.Fields(rel)[0])
		}
	}
	require.Equal(t, []string{part}, updated, strings.Join(plan, "\n"))
}
