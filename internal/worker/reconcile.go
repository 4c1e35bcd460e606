package worker

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/inboxhq/inbox/internal/envelope"
	"github.com/inboxhq/inbox/internal/labels"
)

// ReconcileArgs is the periodic job that checks the inbox's invariant that
// every pending envelope has a live processing job. Its kind is stored in
// river_job: never rename it.
type ReconcileArgs struct{}

// Kind implements river.JobArgs.
func (ReconcileArgs) Kind() string { return "reconcile_envelopes" }

// InsertOpts keeps one reconcile job queued at a time.
func (ReconcileArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{UniqueOpts: river.UniqueOpts{ByPeriod: 30 * time.Second}}
}

// ReconcileWorker repairs what should never happen but must not go
// unnoticed: an envelope left pending with no live job. If its last job
// ended cancelled or discarded without a recorded outcome (an operator
// cancelled it in River UI, or River gave up on it while the database was
// unreachable), the envelope fails with that reason, so an operator can
// replay it on purpose. If it has no job at all, a job is enqueued. Both log
// a warning. It also deletes old throttle windows.
type ReconcileWorker struct {
	river.WorkerDefaults[ReconcileArgs]
	Pool   *pgxpool.Pool
	Logger *slog.Logger
	// Grace is how old a pending envelope must be before it is checked.
	Grace time.Duration
}

// Timeout implements river.Worker.
func (w *ReconcileWorker) Timeout(*river.Job[ReconcileArgs]) time.Duration { return time.Minute }

// Work implements river.Worker.
func (w *ReconcileWorker) Work(ctx context.Context, job *river.Job[ReconcileArgs]) error {
	if err := sweepThrottle(ctx, w.Pool); err != nil {
		w.Logger.Warn("sweep throttle windows", "error", err)
	}
	failed, enqueued, err := Reconcile(ctx, w.Pool, w.Grace)
	if err != nil {
		return err
	}
	if failed+enqueued > 0 {
		w.Logger.Warn("reconciled pending envelopes without a live job", "failed", failed, "enqueued", enqueued)
	}
	return nil
}

// Reconcile checks up to 1000 pending envelopes older than grace that have
// no live job; see ReconcileWorker. It inserts jobs with its own insert-only
// River client. Safe to run concurrently: rows are locked (SKIP LOCKED).
func Reconcile(ctx context.Context, pool *pgxpool.Pool, grace time.Duration) (failed, enqueued int, err error) {
	client, err := envelope.NewInsertClient(pool, slog.New(slog.DiscardHandler))
	if err != nil {
		return 0, 0, err
	}
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `
			SELECT e.id, e.source,
			       (SELECT j.state::text || ' ' || j.id FROM river_job j
			         WHERE j.kind = 'process_envelope' AND (j.args->>'envelope_id')::bigint = e.id
			         ORDER BY j.id DESC LIMIT 1) AS last_job,
			       clock_timestamp()
			  FROM envelope e
			 WHERE e.status = 'pending' AND e.received_at < now() - make_interval(secs => $1)
			   AND NOT EXISTS (
			       SELECT 1 FROM river_job j
			        WHERE j.kind = 'process_envelope' AND (j.args->>'envelope_id')::bigint = e.id
			          AND j.state = ANY($2::river_job_state[]))
			 ORDER BY e.id
			 LIMIT 1000
			   FOR UPDATE OF e SKIP LOCKED`, grace.Seconds(), envelope.LiveJobStates())
		if err != nil {
			return fmt.Errorf("find orphaned envelopes: %w", err)
		}
		type orphan struct {
			id      int64
			source  string
			lastJob *string
			now     time.Time
		}
		list, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (orphan, error) {
			var o orphan
			return o, r.Scan(&o.id, &o.source, &o.lastJob, &o.now)
		})
		if err != nil {
			return fmt.Errorf("find orphaned envelopes: %w", err)
		}
		for _, o := range list {
			if o.lastJob != nil {
				reason := "processing job ended " + *o.lastJob + " without a recorded outcome; replay to process it again"
				res, _ := json.Marshal(map[string]string{"reason": reason})
				if err := envelope.Finish(ctx, tx, o.id, envelope.StatusFailed, res, envelope.Attempt{
					Outcome: envelope.OutcomeFailed, Error: reason, Cause: string(labels.CauseOrphaned), StartedAt: o.now, Worker: "reconcile",
				}); err != nil {
					return err
				}
				failed++
				continue
			}
			// River's default limit: decide bounds the attempts by the
			// source's max_attempts.
			job := envelope.ProcessJob(o.id, o.source, 0)
			if _, err := client.InsertTx(ctx, tx, job.Args, job.InsertOpts); err != nil {
				return fmt.Errorf("enqueue envelope %d: %w", o.id, err)
			}
			enqueued++
		}
		return nil
	})
	return failed, enqueued, err
}
