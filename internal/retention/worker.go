package retention

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/inboxhq/inbox/internal/envelope"
)

// PurgeArgs is the River job that runs Purge. Its kind is stored in
// river_job: never rename it. Zero fields take Config's defaults; durations
// are Go durations (nanoseconds in the job's JSON).
type PurgeArgs struct {
	BodyAfter   time.Duration `json:"body_after,omitempty"`
	DeleteAfter time.Duration `json:"delete_after,omitempty"`
	BatchSize   int           `json:"batch_size,omitempty"`
	DryRun      bool          `json:"dry_run,omitempty"`
}

// Kind implements river.JobArgs.
func (PurgeArgs) Kind() string { return "purge_envelopes" }

// InsertOpts makes the job unique among purges that are waiting or running,
// so a purge that runs long (or is retrying) is never joined by the next
// periodic one. A failed purge is retried a few times; the next period
// starts afresh anyway.
func (PurgeArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{
		MaxAttempts: 3,
		UniqueOpts: river.UniqueOpts{
			ByState: envelope.WaitingOrRunning(),
		},
	}
}

// Config returns the purge configuration the args describe.
func (a PurgeArgs) Config() Config {
	return Config{BodyAfter: a.BodyAfter, DeleteAfter: a.DeleteAfter, BatchSize: a.BatchSize, DryRun: a.DryRun}
}

// DefaultJobTimeout bounds one purge run when PurgeWorker.JobTimeout is zero.
const DefaultJobTimeout = time.Minute

// PurgeWorker is the River worker for PurgeArgs. It records the Report as
// the job's output (river_job.metadata->'output') and logs it.
type PurgeWorker struct {
	river.WorkerDefaults[PurgeArgs]

	Pool   *pgxpool.Pool
	Logger *slog.Logger
	// JobTimeout bounds one run (default one minute). Keep it below the
	// client's RescueStuckJobsAfter, or River rescues a purge that is still
	// running. A run cut short keeps the batches it committed and the job is
	// retried; the next run carries on where it stopped.
	JobTimeout time.Duration
}

// Timeout implements river.Worker: every run has a timeout.
func (w *PurgeWorker) Timeout(*river.Job[PurgeArgs]) time.Duration {
	if w.JobTimeout > 0 {
		return w.JobTimeout
	}
	return DefaultJobTimeout
}

// Work runs one purge. A bad configuration cancels the job (retrying cannot
// fix it); any other error is retried.
func (w *PurgeWorker) Work(ctx context.Context, job *river.Job[PurgeArgs]) error {
	log := w.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	log = log.With("job_id", job.ID, "attempt", job.Attempt)
	start := time.Now()
	rep, err := Purge(ctx, w.Pool, job.Args.Config())
	if errors.Is(err, ErrInvalidConfig) {
		log.Error("purge: bad configuration", "error", err)
		return river.JobCancel(err)
	}
	if oerr := river.RecordOutput(ctx, rep); oerr != nil {
		log.Warn("purge: record output", "error", oerr)
	}
	attrs := []any{
		"dry_run", rep.DryRun,
		"bodies_dropped", rep.BodiesDropped,
		"envelopes_deleted", rep.EnvelopesDeleted,
		"partitions", partitionSummary(rep.Partitions),
		"body_partitions", partitionSummary(rep.BodyPartitions),
		"keys_swept", rep.KeysSwept,
		"batches", rep.Batches,
		"body_cutoff", rep.BodyCutoff,
		"delete_cutoff", rep.DeleteCutoff,
		"duration", time.Since(start),
	}
	if err != nil {
		log.Warn("purge stopped early: committed batches stay, the rest waits for the retry", append(attrs, "error", err)...)
		return fmt.Errorf("purge: %w", err)
	}
	for _, p := range rep.Partitions {
		if p.Outcome == envelope.PartitionHeld {
			log.Warn("purge: an envelope partition past the delete-after window still holds pending envelopes; it and the newer ones are kept until they are processed",
				"partition", p.Name, "pending", p.Envelopes)
		}
	}
	for _, p := range rep.BodyPartitions {
		switch p.Outcome {
		case envelope.PartitionHeld:
			log.Warn("purge: a day past the body-after window still holds pending envelopes; its bodies are kept until they are processed",
				"partition", p.Name, "pending", p.Envelopes)
		case envelope.PartitionBusy:
			log.Warn("purge: a day's bodies were not dropped: transactions held the body table past the lock wait; the next purge tries again",
				"partition", p.Name)
		}
	}
	log.Info("purge done", attrs...)
	return nil
}

// partitionSummary is "name outcome envelopes, ..." for the log.
func partitionSummary(ps []envelope.PartitionDrop) string {
	var b strings.Builder
	for i, p := range ps {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s %s %d", p.Name, p.Outcome, p.Envelopes)
	}
	return b.String()
}

// PeriodicJob returns the periodic job that inserts a purge with args every
// interval, and once when this client becomes River's leader. Only the
// leader inserts periodic jobs, so several worker processes run one purge.
func PeriodicJob(interval time.Duration, args PurgeArgs) *river.PeriodicJob {
	return river.NewPeriodicJob(
		river.PeriodicInterval(interval),
		func() (river.JobArgs, *river.InsertOpts) { return args, nil },
		&river.PeriodicJobOpts{ID: "purge_envelopes", RunOnStart: true},
	)
}
