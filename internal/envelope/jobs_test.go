package envelope_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/inboxhq/inbox/internal/envelope"
	"github.com/inboxhq/inbox/internal/envelope/envelopetest"
	"github.com/inboxhq/inbox/internal/pgtest"
)

// store inserts delivery id through the Store (envelope and job) and
// returns the envelope id.
func (b *bundle) store1(t *testing.T, id string) int64 {
	t.Helper()
	res, err := b.store.Insert(context.Background(), delivery(id))
	require.NoError(t, err)
	return res.EnvelopeID
}

// finishJobs moves the processing jobs of envelope id to state (a final
// one).
func (b *bundle) finishJobs(t *testing.T, id int64, state string) {
	t.Helper()
	b.exec(t, `UPDATE river_job SET state = $2::river_job_state, finalized_at = now()
		WHERE kind = 'process_envelope' AND (args->>'envelope_id')::bigint = $1`, id, state)
}

// Jobs finds each envelope's processing jobs in every state, or only the
// live ones; a job of another kind naming the same envelope id is not one.
func TestJobsAndLiveJobs(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	waiting, done := b.store1(t, "jobs-waiting"), b.store1(t, "jobs-done")
	b.finishJobs(t, done, "completed")
	none := envelopetest.Insert(t, b.pool, envelopetest.Row{})
	b.exec(t, `INSERT INTO river_job (kind, args, max_attempts, state) VALUES ('other_kind', jsonb_build_object('envelope_id', $1::bigint), 1, 'available')`, none)

	live, err := envelope.LiveJobs(ctx, b.pool, []int64{waiting, done, none, 999999})
	require.NoError(t, err)
	require.Equal(t, map[int64]bool{waiting: true}, live)

	all, err := envelope.Jobs(ctx, b.pool, []int64{done, waiting, none}, false)
	require.NoError(t, err)
	require.Len(t, all, 2)
	require.Equal(t, waiting, all[0].EnvelopeID, "in job id order")
	require.Equal(t, "available", all[0].State)
	require.Equal(t, done, all[1].EnvelopeID)
	require.Equal(t, "completed", all[1].State)
	require.NotNil(t, all[1].FinalizedAt)
	require.Equal(t, 25, all[1].MaxAttempts, "River's default")

	one, err := envelope.Jobs(ctx, b.pool, []int64{done}, false)
	require.NoError(t, err, "the one-envelope form (GIN probe)")
	require.Equal(t, all[1:], one)

	require.NoError(t, pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		got, err := envelope.LiveJobs(ctx, tx, []int64{waiting})
		require.Equal(t, map[int64]bool{waiting: true}, got, "in a transaction too")
		return err
	}))
}

// Orphans are pending envelopes past the grace without a live job, with
// their newest job if they had one; live jobs, final envelopes and young
// ones are left out.
func TestOrphans(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	old := time.Now().Add(-time.Hour)
	jobless := envelopetest.Insert(t, b.pool, envelopetest.Row{Source: "s1", ReceivedAt: old})
	cancelled := b.store1(t, "orphan-cancelled")
	b.finishJobs(t, cancelled, "cancelled")
	queued := b.store1(t, "orphan-queued")
	b.exec(t, `UPDATE envelope SET received_at = $1 WHERE id = ANY($2)`, old, []int64{cancelled, queued})
	envelopetest.Insert(t, b.pool, envelopetest.Row{})                                // too young
	envelopetest.Insert(t, b.pool, envelopetest.Row{Status: "done", ReceivedAt: old}) // final

	var got []envelope.Orphan
	require.NoError(t, pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		var err error
		got, err = envelope.Orphans(ctx, tx, time.Minute, 10)
		return err
	}))
	require.Len(t, got, 2)
	require.Equal(t, jobless, got[0].ID)
	require.Equal(t, "s1", got[0].Source)
	require.Nil(t, got[0].LastJob)
	require.False(t, got[0].Now.IsZero())
	require.Equal(t, cancelled, got[1].ID)
	require.NotNil(t, got[1].LastJob)
	require.Equal(t, "cancelled", got[1].LastJob.State)

	jobs, err := envelope.Jobs(ctx, b.pool, []int64{cancelled}, false)
	require.NoError(t, err)
	require.Equal(t, jobs[0].ID, got[1].LastJob.ID)

	require.NoError(t, pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		one, err := envelope.Orphans(ctx, tx, time.Minute, 1)
		require.Len(t, one, 1, "limit")
		return err
	}))
}

// Orphans looks each candidate's jobs up through river_job's index on the
// envelope id, on a connection whose first calls found the tables empty,
// with a backlog's jobs in river_job: a generic plan cannot use that partial
// index (WHERE kind = 'process_envelope') for a kind given as a parameter,
// and read every job of the kind for each candidate.
func TestOrphansReadTheirJobsNotTheBacklog(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	c, err := b.pool.Acquire(ctx)
	require.NoError(t, err)
	defer c.Release()
	conn := c.Conn()

	// orphans finds them in one transaction, and returns how many it found
	// and how many rows and index entries of river_job it read.
	orphans := func() (found int, read int64) {
		t.Helper()
		read = pgtest.ReadIn(t, conn, func(tx pgx.Tx) {
			list, err := envelope.Orphans(ctx, tx, time.Minute, 1000)
			require.NoError(t, err)
			for _, o := range list {
				require.NotNil(t, o.LastJob, "envelope %d", o.ID)
			}
			found = len(list)
		}, "river_job")
		return found, read
	}

	// The connection's first calls, on empty tables.
	for range 8 {
		n, _ := orphans()
		require.Zero(t, n)
	}

	// 50 pending envelopes past the grace whose jobs were cancelled, and a
	// backlog's 20,000 jobs waiting for other envelopes.
	const candidates, backlog = 50, 20_000
	ids := envelopetest.InsertMany(t, b.pool, candidates, func(int) envelopetest.Row {
		return envelopetest.Row{ReceivedAt: time.Now().Add(-time.Hour)}
	})
	b.exec(t, `
		INSERT INTO river_job (kind, args, state, attempt, finalized_at)
		SELECT 'process_envelope', jsonb_build_object('envelope_id', e), 'cancelled', 1, now() FROM unnest($1::bigint[]) e`, ids)
	b.exec(t, `
		INSERT INTO river_job (kind, args, state)
		SELECT 'process_envelope', jsonb_build_object('envelope_id', -g), 'available' FROM generate_series(1, $1) g`, backlog)

	n, read := orphans()
	require.Equal(t, candidates, n)
	require.GreaterOrEqual(t, read, int64(candidates), "each one's cancelled job is counted")
	require.LessOrEqual(t, read, int64(4*candidates), "read %d rows and index entries of river_job for %d candidates, with %d jobs", read, candidates, backlog+candidates)
}
