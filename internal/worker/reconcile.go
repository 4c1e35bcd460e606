package worker

import (
	"cmp"
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
// a warning. It also creates the envelope partitions ahead
// (envelope.EnsurePartitions), deletes old throttle windows, folds the envelope
// counts' deltas (envelope.CompactCounts), so that a read of the counts
// sums at most about a minute of them, and deletes replay digests past
// their window.
type ReconcileWorker struct {
	river.WorkerDefaults[ReconcileArgs]
	Pool   *pgxpool.Pool
	Logger *slog.Logger
	// Grace is how old a pending envelope must be before it is checked.
	Grace time.Duration
	// PartitionWidth is the width of the envelope partitions it creates
	// (envelope.PartitionDay or PartitionHour; 0: as wide as the newest),
	// PartitionsAhead how far past now (0: envelope.DefaultPartitionsAhead).
	PartitionWidth, PartitionsAhead time.Duration
}

// Timeout implements river.Worker.
func (w *ReconcileWorker) Timeout(*river.Job[ReconcileArgs]) time.Duration { return time.Minute }

// Work implements river.Worker.
func (w *ReconcileWorker) Work(ctx context.Context, job *river.Job[ReconcileArgs]) error {
	if err := sweepThrottle(ctx, w.Pool); err != nil {
		w.Logger.Warn("sweep throttle windows", "error", err)
	}
	ahead := cmp.Or(w.PartitionsAhead, envelope.DefaultPartitionsAhead)
	if n, err := envelope.EnsurePartitions(ctx, w.Pool, ahead, w.PartitionWidth); err != nil {
		w.Logger.Error("create envelope partitions ahead: ingest cannot store past the newest one", "error", err)
	} else if n > 0 {
		w.Logger.Info("created envelope partitions", "partitions", n, "ahead", ahead)
	}
	if _, err := envelope.CompactCounts(ctx, w.Pool); err != nil {
		w.Logger.Warn("compact envelope counts", "error", err)
	}
	// Batches of 10,000, until the expired ones are gone or 20 s have
	// passed (a minute of 2,000 GitHub deliveries/s is 12 batches).
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); {
		n, err := envelope.DeleteExpiredDigests(ctx, w.Pool, 10000)
		if err != nil {
			w.Logger.Warn("delete expired replay digests", "error", err)
			break
		}
		if n < 10000 {
			break
		}
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
		list, err := envelope.Orphans(ctx, tx, grace, 1000)
		if err != nil {
			return err
		}
		for _, o := range list {
			if o.LastJob != nil {
				reason := fmt.Sprintf("processing job ended %s %d without a recorded outcome; replay to process it again", o.LastJob.State, o.LastJob.ID)
				res, _ := json.Marshal(map[string]string{"reason": reason})
				if err := envelope.Finish(ctx, tx, o.ID, envelope.StatusFailed, res, envelope.Attempt{
					Outcome: envelope.OutcomeFailed, Error: reason, Cause: string(labels.CauseOrphaned), StartedAt: o.Now, Worker: "reconcile",
				}); err != nil {
					return err
				}
				failed++
				continue
			}
			// River's default limit: decide bounds the attempts by the
			// source's max_attempts.
			job := envelope.ProcessJob(o.ID, o.Source, 0)
			if _, err := client.InsertTx(ctx, tx, job.Args, job.InsertOpts); err != nil {
				return fmt.Errorf("enqueue envelope %d: %w", o.ID, err)
			}
			enqueued++
		}
		return nil
	})
	return failed, enqueued, err
}
