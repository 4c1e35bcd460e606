package backfill

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/riverqueue/river"

	"github.com/inboxhq/inbox/internal/backfill/backfillspec"
	"github.com/inboxhq/inbox/internal/config"
	"github.com/inboxhq/inbox/internal/envelope"
	"github.com/inboxhq/inbox/internal/provider"
)

// ReconcileActor is the backfill_run.actor of the periodic reconcile.
const ReconcileActor = "reconcile"

// ReconcileArgs is the River job that backfills one source over its
// window. Its kind is stored in river_job: never rename it.
type ReconcileArgs struct {
	Source string `json:"source"`
}

// Kind implements river.JobArgs.
func (ReconcileArgs) Kind() string { return "backfill_reconcile" }

// InsertOpts makes the job unique per source among those waiting or
// running, so a slow reconcile is never joined by the next period's. A run
// cut short (the job timeout, the API failing) is retried, each retry
// carrying on from the cursor (Stripe), up to 10 attempts.
func (ReconcileArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{
		MaxAttempts: 10,
		UniqueOpts: river.UniqueOpts{
			ByArgs:  true,
			ByState: envelope.WaitingOrRunning(),
		},
	}
}

// ObserveFunc records a finished reconcile attempt (metrics): found and
// stored are that attempt's, so counters summed over attempts count each
// event once.
// neverDelivered is the part of found older than the provider's retry
// window (Result.NeverDelivered).
type ObserveFunc func(source, result string, found, stored, neverDelivered int, at time.Time)

// ReconcileWorker runs ReconcileArgs: a backfill of the source over its
// configured window (Backfill.Window) up to Backfill.Lag ago (events
// younger than that may still be on their way), as actor "reconcile".
type ReconcileWorker struct {
	river.WorkerDefaults[ReconcileArgs]

	Runner *Runner
	Config *config.Config
	// JobTimeout bounds one attempt of a source whose config has no
	// Backfill.Timeout (config load sets one: DefaultReconcileTimeout);
	// keep every timeout below the client's RescueStuckJobsAfter
	// (MaxTimeout). An attempt cut short records what it stored (status
	// interrupted) and the retry resumes the same run (Stripe; GitHub's
	// lists its window again).
	JobTimeout time.Duration
	// ObserveFunc, when set, gets each run's result.
	ObserveFunc ObserveFunc
}

// Timeout implements river.Worker: the source's Backfill.Timeout, not the
// processing job timeout.
func (w *ReconcileWorker) Timeout(job *river.Job[ReconcileArgs]) time.Duration {
	if src := w.Config.Sources[job.Args.Source]; src != nil && src.Backfill != nil && src.Backfill.Timeout > 0 {
		return src.Backfill.Timeout
	}
	if w.JobTimeout > 0 {
		return w.JobTimeout
	}
	return backfillspec.DefaultReconcileTimeout
}

// MaxTimeout is the longest reconcile timeout of cfg's reconciled sources
// (0: none): River's RescueStuckJobsAfter must exceed it.
func MaxTimeout(cfg *config.Config) time.Duration {
	var longest time.Duration
	for _, name := range ReconciledSources(cfg) {
		longest = max(longest, cfg.Sources[name].Backfill.Timeout)
	}
	return longest
}

// Work runs one reconcile. A source no longer configured for backfill
// cancels the job (retrying cannot help).
func (w *ReconcileWorker) Work(ctx context.Context, job *river.Job[ReconcileArgs]) error {
	src := w.Config.Sources[job.Args.Source]
	if src == nil || src.Backfill == nil || !backfillspec.Supported(src.Provider) {
		return river.JobCancel(fmt.Errorf("source %q is not configured for backfill", job.Args.Source))
	}
	now := time.Now
	if w.Runner.Now != nil {
		now = w.Runner.Now
	}
	at := now()
	req := Request{Source: src, Since: at.Add(-Window(src)), Until: at.Add(-src.Backfill.Lag), Actor: ReconcileActor}
	if job.Attempt > 1 && src.Provider == provider.Stripe {
		// A retry carries on with the run an earlier attempt of this job
		// started and did not finish (cut short by the job timeout, or the
		// API failing), from its cursor.
		id, err := unfinishedRun(ctx, w.Runner.Store.Pool(), src.Name, ReconcileActor, job.CreatedAt.Add(-time.Minute))
		if err != nil {
			return err
		}
		req.Resume = id
	}
	res, err := w.Runner.Run(ctx, req)
	if req.Resume != 0 && errors.Is(err, ErrCannotResume) {
		// The config changed (another process, another accounts list):
		// that run cannot go on, a new one lists the window again.
		req.Resume = 0
		res, err = w.Runner.Run(ctx, req)
	}
	if res.RunID != 0 && w.ObserveFunc != nil {
		// This attempt's counts only: a resumed run's are the whole run's,
		// and the earlier attempts were observed already.
		w.ObserveFunc(src.Name, res.Status, res.Found-res.PriorFound, res.Stored-res.PriorStored, res.NeverDelivered, now())
	}
	_ = river.RecordOutput(ctx, res.summary()) // a convenience: the run's row is the record
	return err
}

// summary is a Result without its list, for a job's output.
func (r Result) summary() Result {
	r.Missing = nil
	return r
}

// PeriodicJobs returns one periodic job per source of cfg whose backfill
// section sets every. Only River's leader inserts periodic jobs, so several
// worker processes run one reconcile per period.
func PeriodicJobs(cfg *config.Config) []*river.PeriodicJob {
	var out []*river.PeriodicJob
	for _, name := range cfg.Names() {
		src := cfg.Sources[name]
		if src.Backfill == nil || src.Backfill.Every <= 0 || !backfillspec.Supported(src.Provider) {
			continue
		}
		args := ReconcileArgs{Source: name}
		out = append(out, river.NewPeriodicJob(
			river.PeriodicInterval(src.Backfill.Every),
			func() (river.JobArgs, *river.InsertOpts) { return args, nil },
			&river.PeriodicJobOpts{ID: "backfill_reconcile_" + name},
		))
	}
	return out
}

// ReconciledSources returns the names of cfg's sources with a periodic
// reconcile.
func ReconciledSources(cfg *config.Config) []string {
	var out []string
	for _, name := range cfg.Names() {
		if b := cfg.Sources[name].Backfill; b != nil && b.Every > 0 {
			out = append(out, name)
		}
	}
	return out
}
