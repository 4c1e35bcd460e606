package worker

import (
	"cmp"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/inboxhq/inbox/internal/handlers"
	"github.com/inboxhq/inbox/internal/metrics"
)

// Config configures the worker's River client.
type Config struct {
	Policy Policy
	// MaxWorkers is how many jobs River runs at once (default
	// DefaultMaxWorkers). A running job holds no connection while it waits
	// for its batch, so this is how many envelopes can wait to share a
	// transaction, not how many transactions run: see Batching.
	MaxWorkers int
	// Batching bounds the transactions that process envelopes. The pool
	// needs PoolSize(Batching) connections.
	Batching Batching
	// FetchCooldown and FetchPollInterval tune River's fetch loop; zero keeps
	// DefaultFetchCooldown and River's default poll interval (1 s).
	FetchCooldown     time.Duration
	FetchPollInterval time.Duration
	// RescueStuckJobsAfter is when River rescues a job whose worker died. It
	// must exceed Policy.JobTimeout; zero means JobTimeout + 1 minute.
	RescueStuckJobsAfter time.Duration
	// Name identifies this process in envelope_attempt.worker.
	Name string
	// RetryPolicy schedules retries after a transient error for sources
	// without their own backoff; nil keeps River's default (attempt^4
	// seconds, with jitter).
	RetryPolicy river.ClientRetryPolicy
	// Sources holds per-source backoff and throttle settings.
	Sources map[string]SourcePolicy
	// Metrics, when set, receives the worker's counters.
	Metrics *metrics.Worker
	// Yield, when set, slows processing while ingest reports store
	// pressure (its Run must be started by the caller).
	Yield *Yield
	// ReconcileEvery is how often pending envelopes without a live job are
	// looked for (default 1 minute; negative disables).
	ReconcileEvery time.Duration
	// PartitionWidth is the width of the envelope partitions the reconcile
	// creates ahead (envelope.PartitionDay or PartitionHour; 0: as wide as
	// the newest one).
	PartitionWidth time.Duration
	// PeriodicJobs and Workers add jobs of other packages (retention).
	PeriodicJobs []*river.PeriodicJob
	// Register adds other packages' workers.
	Register func(*river.Workers) error
	// CompletedJobRetention is how long River keeps the row of a job it
	// completed before its cleaner deletes it (default
	// DefaultCompletedJobRetention): the periodic jobs. A processing job is
	// not completed but deleted, in the transaction that finishes its
	// envelope (riverjob.DeleteRunning); the envelope and its attempt rows
	// are the record of what ran.
	CompletedJobRetention time.Duration
}

// DefaultCompletedJobRetention is Config.CompletedJobRetention when unset.
const DefaultCompletedJobRetention = time.Hour

// MinCompletedJobRetention is the shortest CompletedJobRetention: the
// reconcile's periodic job is unique by a 30-second period, counted over
// its completed rows too.
const MinCompletedJobRetention = time.Minute

// ReindexedIndexes is what River's reindexer rebuilds, sorted: its default
// list, less the GIN indexes on args and metadata that migration 00194
// dropped.
func ReindexedIndexes() []string {
	names := slices.DeleteFunc(river.ReindexerIndexNamesDefault(), func(n string) bool {
		return n == "river_job_args_index" || n == "river_job_metadata_index"
	})
	slices.Sort(names)
	return names
}

// DefaultMaxWorkers is River's MaxWorkers when Config sets none: enough
// waiting jobs to fill DefaultBatching's batches (3 x 60) twice over, so one
// set of batches forms while the other commits.
const DefaultMaxWorkers = 360

// DefaultFetchCooldown is River's FetchCooldown when Config sets none.
// River fetches at most once per cooldown, so it caps a worker at about
// MaxWorkers jobs per cooldown (360 / 20 ms = 18,000 jobs/s).
const DefaultFetchCooldown = 20 * time.Millisecond

// PoolSize is how many connections a worker's pool needs: one per batch
// transaction, plus River's listener, its leader's maintenance services
// and completer, the ledger's account creation, the throttle's slots and
// the admin listener's readiness check.
func PoolSize(b Batching) int { return b.Connections() + 8 }

// NewClient returns a River client that processes envelopes with the
// handlers registry routes them to (a *handlers.Registry, or a decorator of
// one). Start it with Start; stop it with Stop (lets running jobs finish).
func NewClient(pool *pgxpool.Pool, registry handlers.Router, cfg Config, logger *slog.Logger) (*river.Client[pgx.Tx], error) {
	if cfg.MaxWorkers <= 0 {
		cfg.MaxWorkers = DefaultMaxWorkers
	}
	p := cfg.Policy
	if p.JobTimeout <= 0 {
		p.JobTimeout = DefaultPolicy.JobTimeout
	}
	if p.SnoozeDefault <= 0 {
		p.SnoozeDefault = DefaultPolicy.SnoozeDefault
	}
	if p.MaxSnooze <= 0 {
		p.MaxSnooze = DefaultPolicy.MaxSnooze
	}
	if p.MaxAge <= 0 {
		p.MaxAge = DefaultPolicy.MaxAge
	}
	retention := cmp.Or(cfg.CompletedJobRetention, DefaultCompletedJobRetention)
	if retention < MinCompletedJobRetention {
		return nil, fmt.Errorf("completed job retention %s: at least %s", retention, MinCompletedJobRetention)
	}
	rescue := cfg.RescueStuckJobsAfter
	if rescue <= 0 {
		rescue = p.JobTimeout + time.Minute
	}
	if rescue <= p.JobTimeout {
		return nil, fmt.Errorf("rescue-after (%s) must exceed the job timeout (%s)", rescue, p.JobTimeout)
	}
	if cfg.Name == "" {
		cfg.Name = DefaultName()
	}
	workers := river.NewWorkers()
	if err := river.AddWorkerSafely(workers, &ProcessWorker{Pool: pool, Registry: registry, Policy: p, Logger: logger, Name: cfg.Name, Sources: cfg.Sources, Metrics: cfg.Metrics, Batching: cfg.Batching, Yield: cfg.Yield}); err != nil {
		return nil, fmt.Errorf("register worker: %w", err)
	}
	periodic := append([]*river.PeriodicJob(nil), cfg.PeriodicJobs...)
	if cfg.ReconcileEvery >= 0 {
		every := cfg.ReconcileEvery
		if every == 0 {
			every = time.Minute
		}
		if err := river.AddWorkerSafely(workers, &ReconcileWorker{Pool: pool, Logger: logger, Grace: max(every, time.Minute), PartitionWidth: cfg.PartitionWidth}); err != nil {
			return nil, fmt.Errorf("register reconcile worker: %w", err)
		}
		periodic = append(periodic, river.NewPeriodicJob(river.PeriodicInterval(every),
			func() (river.JobArgs, *river.InsertOpts) { return ReconcileArgs{}, nil }, nil))
	}
	if cfg.Register != nil {
		if err := cfg.Register(workers); err != nil {
			return nil, fmt.Errorf("register workers: %w", err)
		}
	}
	fallback := cfg.RetryPolicy
	if fallback == nil {
		fallback = &river.DefaultClientRetryPolicy{}
	}
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		Queues:               map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: cfg.MaxWorkers}},
		Workers:              workers,
		JobTimeout:           p.JobTimeout,
		RescueStuckJobsAfter: rescue,
		FetchCooldown:        cmp.Or(cfg.FetchCooldown, DefaultFetchCooldown),
		FetchPollInterval:    cfg.FetchPollInterval,
		Logger:               riverLogger(logger),
		RetryPolicy:          &retryPolicy{sources: cfg.Sources, fallback: fallback},
		PeriodicJobs:         periodic,
		// The rows of completed jobs: see Config.CompletedJobRetention.
		CompletedJobRetentionPeriod: retention,
		ReindexerIndexNames:         ReindexedIndexes(),
	})
	if err != nil {
		return nil, fmt.Errorf("river client: %w", err)
	}
	return client, nil
}
