package riverjob_test

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/inboxhq/inbox/internal/envelope"
	"github.com/inboxhq/inbox/internal/pgtest"
	"github.com/inboxhq/inbox/internal/riverjob"
)

// What the worker relies on, against River's schema in go.mod: a running
// job's row is deleted in the caller's transaction (a rollback undoes it);
// a job in another state (available here) is left; an unknown id is absent.
func TestDeleteRunning(t *testing.T) {
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
	states := func() map[int64]string {
		rows, err := pool.Query(ctx, `SELECT id, state::text FROM river_job WHERE id = ANY($1)`, ids)
		require.NoError(t, err)
		out := map[int64]string{}
		var id int64
		var st string
		_, err = pgx.ForEachRow(rows, []any{&id, &st}, func() error { out[id] = st; return nil })
		require.NoError(t, err)
		return out
	}

	// Rolled back: nothing changes.
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	deleted, err := riverjob.DeleteRunning(ctx, tx, ids[:1])
	require.NoError(t, err)
	require.Equal(t, map[int64]bool{ids[0]: true}, deleted)
	require.NoError(t, tx.Rollback(ctx))
	require.Equal(t, map[int64]string{ids[0]: "running", ids[1]: "running", ids[2]: "available"}, states())

	require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		deleted, err = riverjob.DeleteRunning(ctx, tx, append(ids, 999999999))
		return err
	}))
	require.Equal(t, map[int64]bool{ids[0]: true, ids[1]: true}, deleted)
	require.Equal(t, map[int64]string{ids[2]: "available"}, states())

	empty, err := riverjob.DeleteRunning(ctx, nil, nil)
	require.NoError(t, err)
	require.Empty(t, empty)
}

type selfDeleting struct{}

func (selfDeleting) Kind() string { return "riverjob_self_deleting" }

// selfDeletingWorker deletes its own job in a transaction and returns nil,
// as the worker does for a batch whose envelopes are final.
type selfDeletingWorker struct {
	river.WorkerDefaults[selfDeleting]
	pool   *pgxpool.Pool
	worked sync.Once
	done   chan struct{}
}

func (w *selfDeletingWorker) Work(ctx context.Context, job *river.Job[selfDeleting]) error {
	defer w.worked.Do(func() { close(w.done) })
	return pgx.BeginFunc(ctx, w.pool, func(tx pgx.Tx) error {
		deleted, err := riverjob.DeleteRunning(ctx, tx, []int64{job.ID})
		if err == nil && !deleted[job.ID] {
			err = pgx.ErrNoRows
		}
		return err
	})
}

// errorLog records the River client's warnings and errors.
type errorLog struct {
	mu   sync.Mutex
	msgs []string
}

func (l *errorLog) Enabled(_ context.Context, lv slog.Level) bool { return lv >= slog.LevelWarn }
func (l *errorLog) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.msgs = append(l.msgs, r.Message)
	return nil
}
func (l *errorLog) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *errorLog) WithGroup(string) slog.Handler      { return l }

// River's own client, working a job whose row the worker deleted before
// Work returned nil: its completer finds no row and moves on, and River
// logs no warning or error, through the client's stop, which waits for the
// completer to flush. A River upgrade whose completer treats a missing row
// as an error (it would log it, and retry the batch) fails here.
func TestRiverCompleterToleratesADeletedJob(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	w := &selfDeletingWorker{pool: pool, done: make(chan struct{})}
	workers := river.NewWorkers()
	river.AddWorker(workers, w)
	logs := &errorLog{}
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 1}},
		Workers:           workers,
		Logger:            slog.New(logs),
		FetchCooldown:     10 * time.Millisecond,
		FetchPollInterval: 20 * time.Millisecond,
		TestOnly:          true,
	})
	require.NoError(t, err)
	require.NoError(t, client.Start(ctx))
	_, err = client.Insert(ctx, selfDeleting{}, nil)
	require.NoError(t, err)
	select {
	case <-w.done:
	case <-time.After(30 * time.Second):
		t.Fatal("the job was not worked within 30 s")
	}
	stopCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	require.NoError(t, client.Stop(stopCtx))

	logs.mu.Lock()
	defer logs.mu.Unlock()
	require.Empty(t, logs.msgs, "River logged no warning or error")
}

// The delete reads the batch's rows of river_job, not the table, on a
// connection whose first calls found river_job empty and vacuumed (as it is
// whenever the worker is idle: its jobs deleted), after a peak left a backlog
// of running jobs that nothing analyzed, and for as long as the connection
// lives. A plan cached from those first calls is a sequential scan of
// river_job; one through River's fetch index (the state usable) walks every
// running entry, dead versions included.
func TestDeleteRunningReadsTheBatchNotTheBacklog(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	_, err := pool.Exec(ctx, `VACUUM river_job`)
	require.NoError(t, err)
	c, err := pool.Acquire(ctx)
	require.NoError(t, err)
	defer c.Release()
	conn := c.Conn()

	// del deletes the running jobs of ids in one transaction, and returns
	// how many it deleted and how many rows and index entries of river_job
	// it read.
	del := func(ids []int64) (deleted int, read int64) {
		t.Helper()
		read = pgtest.ReadIn(t, conn, func(tx pgx.Tx) {
			got, err := riverjob.DeleteRunning(ctx, tx, ids)
			require.NoError(t, err)
			deleted = len(got)
		}, "river_job")
		return deleted, read
	}

	// The connection's first calls, on an empty river_job.
	require.Zero(t, pgtest.Count(t, pool, `SELECT relpages FROM pg_class WHERE relname = 'river_job'`), "vacuumed empty")
	for range 8 {
		deleted, _ := del([]int64{1, 2})
		require.Zero(t, deleted)
	}

	// A peak leaves 50,000 jobs running.
	const backlog = 50_000
	_, err = pool.Exec(ctx, `
		INSERT INTO river_job (kind, args, state, attempt, attempted_at)
		SELECT 'process_envelope', jsonb_build_object('envelope_id', g), 'running', 1, now()
		  FROM generate_series(1, $1) g`, backlog)
	require.NoError(t, err)

	const size = 60
	for n := range 25 {
		ids := pgtest.Scalar[[]int64](t, pool, `SELECT array_agg(id ORDER BY id) FROM (SELECT id FROM river_job ORDER BY id LIMIT $1) x`, size)
		deleted, read := del(ids)
		require.Equal(t, size, deleted)
		require.GreaterOrEqual(t, read, int64(size), "the batch's entries of the primary key are counted")
		require.LessOrEqual(t, read, int64(2*size), "batch %d read %d rows and index entries of river_job, with %d jobs", n, read, backlog-n*size)
	}
}
