package riverjob_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/inboxhq/inbox/internal/envelope"
	"github.com/inboxhq/inbox/internal/pgtest"
	"github.com/inboxhq/inbox/internal/riverjob"
)

// What the worker relies on, against the River version in go.mod: a
// running job becomes completed at the given time, with its attempt and
// scheduled time untouched, in the caller's transaction (a rollback undoes
// it); a job in another state (available here) is returned unchanged and
// left so; an unknown id is absent. A River upgrade that changes any of
// this fails here.
func TestCompleteRunning(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	client, err := envelope.NewInsertClient(pool, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	var ids []int64
	require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		res, err := client.InsertManyTx(ctx, tx, []river.InsertManyParams{
			envelope.ProcessJob(1, "src", 0), envelope.ProcessJob(2, "src", 0), envelope.ProcessJob(3, "src", 0)})
		for _, r := range res {
			ids = append(ids, r.Job.ID)
		}
		return err
	}))
	// Two of them running at attempt 1, as River's fetch leaves them.
	_, err = pool.Exec(ctx, `UPDATE river_job SET state = 'running', attempt = 1, attempted_at = now() WHERE id = ANY($1)`, ids[:2])
	require.NoError(t, err)
	type row struct {
		State     string
		Attempt   int
		Finalized *time.Time
	}
	read := func(id int64) row {
		var r row
		require.NoError(t, pool.QueryRow(ctx, `SELECT state::text, attempt, finalized_at FROM river_job WHERE id = $1`, id).Scan(&r.State, &r.Attempt, &r.Finalized))
		return r
	}
	now := time.Now().UTC().Truncate(time.Microsecond)

	// Rolled back: nothing changes.
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	_, err = riverjob.CompleteRunning(ctx, tx, ids[:1], now)
	require.NoError(t, err)
	require.NoError(t, tx.Rollback(ctx))
	require.Equal(t, "running", read(ids[0]).State)

	var states map[int64]rivertype.JobState
	require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		states, err = riverjob.CompleteRunning(ctx, tx, append(ids, 999999999), now)
		return err
	}))
	require.Equal(t, map[int64]rivertype.JobState{ids[0]: rivertype.JobStateCompleted, ids[1]: rivertype.JobStateCompleted,
		ids[2]: rivertype.JobStateAvailable}, states)
	for _, id := range ids[:2] {
		r := read(id)
		require.Equal(t, "completed", r.State)
		require.Equal(t, 1, r.Attempt)
		require.NotNil(t, r.Finalized)
		require.True(t, r.Finalized.Equal(now), "finalized at the time given: %s", r.Finalized)
	}
	require.Equal(t, row{State: "available"}, read(ids[2]))

	empty, err := riverjob.CompleteRunning(ctx, nil, nil, now)
	require.NoError(t, err)
	require.Empty(t, empty)
}
