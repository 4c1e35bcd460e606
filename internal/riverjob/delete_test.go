package riverjob_test

import (
	"context"
	"log/slog"
	"strings"
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

// The delete's plan uses river_job's primary key, even the generic plan a
// connection keeps from its first calls on an empty table: a plan through
// River's fetch index (state first) would walk every running entry, dead
// versions included, at each call.
func TestDeleteRunningPlanUsesThePrimaryKey(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	conn, err := pool.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	require.Zero(t, pgtest.Count(t, pool, `SELECT count(*) FROM river_job`), "the plan is made on an empty table, as on a new deployment")
	_, err = conn.Exec(ctx, `SET plan_cache_mode = force_generic_plan`)
	require.NoError(t, err)
	_, err = conn.Exec(ctx, `PREPARE del(bigint[]) AS `+riverjob.DeleteRunningSQL)
	require.NoError(t, err)
	rows, err := conn.Query(ctx, `EXPLAIN EXECUTE del('{1,2,3}')`)
	require.NoError(t, err)
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	plan := strings.Join(lines, "\n")
	require.Contains(t, plan, "river_job_pkey", plan)
	require.NotContains(t, plan, "river_job_prioritized_fetching_index", plan)
	require.NotContains(t, plan, "Seq Scan", plan)
}
