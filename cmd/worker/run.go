package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/riverqueue/river"
	"riverqueue.com/riverui"

	"github.com/inboxhq/inbox/internal/admin"
	"github.com/inboxhq/inbox/internal/backfill"
	"github.com/inboxhq/inbox/internal/cli"
	"github.com/inboxhq/inbox/internal/config"
	"github.com/inboxhq/inbox/internal/console"
	"github.com/inboxhq/inbox/internal/durations"
	"github.com/inboxhq/inbox/internal/envelope"
	"github.com/inboxhq/inbox/internal/forward"
	"github.com/inboxhq/inbox/internal/handlers"
	"github.com/inboxhq/inbox/internal/metrics"
	"github.com/inboxhq/inbox/internal/pg"
	"github.com/inboxhq/inbox/internal/provider"
	"github.com/inboxhq/inbox/internal/retention"
	"github.com/inboxhq/inbox/internal/tracing"
	"github.com/inboxhq/inbox/internal/worker"
)

// runOptions is what worker run's flags and environment say.
type runOptions struct {
	maxWorkers               int
	batching                 worker.Batching
	jobTimeout, rescueAfter  time.Duration
	fetchCooldown, fetchPoll time.Duration
	policy                   worker.Policy
	drain                    time.Duration
	logLevel, logFormat      string
	cfgPath, adminAddr       string
	purgeEvery               time.Duration
	purge                    retention.PurgeArgs
	partitionWidth           time.Duration
	completedJobRetention    time.Duration
	consoleOn, riverUI       bool
	adminUsers               string
	console                  consoleConfig
	uiUser, uiPassword       string
	// handlers are the optional handler packages to register
	// (--handlers, see optionalHandlers).
	handlers []string
	// yieldMin is --yield-min-rate (0: never yield); yieldMinLag and
	// yieldMaxLag are --yield-min-lag and --yield-max-lag.
	yieldMin    int
	yieldMinLag time.Duration
	yieldMaxLag time.Duration
}

// guarded says whether the admin listener serves River UI or the console,
// both behind the operators' login.
func (o runOptions) guarded() bool { return o.riverUI || o.consoleOn }

// parseRun reads worker run's flags (and the environment they fall back
// to). A bad flag is a cli.UsageError.
func parseRun(args []string, getenv func(string) string, stderr io.Writer) (runOptions, error) {
	var o runOptions
	fs := cli.NewFlags("worker run", getenv, stderr)
	maxWorkers := fs.Int("max-workers", "WORKER_MAX_WORKERS", worker.DefaultMaxWorkers, "jobs River runs at once; they wait to share batch transactions, so this is not a connection count (default from measurement: docs/benchmarks.md)")
	batchSize := fs.Int("batch-size", "WORKER_BATCH_SIZE", worker.DefaultBatching.MaxBatch, fmt.Sprintf("most envelopes one transaction processes (1 to %d; 1 turns batching off)", worker.MaxBatchLimit))
	batchConcurrency := fs.Int("batch-concurrency", "WORKER_BATCH_CONCURRENCY", worker.DefaultBatching.MaxConcurrent, "batch transactions at once, one connection each")
	unbatched := fs.Int("forward-concurrency", "WORKER_FORWARD_CONCURRENCY", worker.DefaultBatching.MaxUnbatched, "envelopes of forwarding sources (one transaction each, outbound HTTP inside) processed at once")
	jobTimeout := fs.Duration("job-timeout", "WORKER_JOB_TIMEOUT", time.Minute, "bound on one processing attempt (never disabled)")
	rescueAfter := fs.Duration("rescue-after", "WORKER_RESCUE_AFTER", 0, "rescue a job whose worker died after this long (default job timeout + 1m; must exceed it)")
	fetchCooldown := fs.Duration("fetch-cooldown", "WORKER_FETCH_COOLDOWN", worker.DefaultFetchCooldown, "River fetch cooldown: at most --max-workers jobs are fetched per cooldown")
	fetchPoll := fs.Duration("fetch-poll-interval", "WORKER_FETCH_POLL_INTERVAL", 0, "River fetch poll interval (default 1s)")
	snoozeDefault := fs.Duration("snooze", "WORKER_SNOOZE", worker.DefaultPolicy.SnoozeDefault, "wait of a not-ready envelope")
	maxSnooze := fs.Duration("max-snooze", "WORKER_MAX_SNOOZE", worker.DefaultPolicy.MaxSnooze, "cap on one snooze (downstream Retry-After included)")
	maxAge := fs.Duration("max-age", "WORKER_MAX_AGE", worker.DefaultPolicy.MaxAge, "an envelope older than this fails instead of snoozing again (raised to the provider's retry window + 1h; a source's max_age replaces it)")
	drain := fs.Duration("shutdown-timeout", "WORKER_SHUTDOWN_TIMEOUT", 30*time.Second, "how long SIGTERM lets running jobs finish")
	logLevel := fs.String("log-level", "LOG_LEVEL", "info", "debug, info, warn or error")
	logFormat := fs.String("log-format", "LOG_FORMAT", "json", "json or text")
	cfgPath := fs.String("config", "INBOX_CONFIG", "", "sources YAML file (per-source backoff, throttle, forwarding; optional)")
	yieldMin := fs.Int("yield-min-rate", "WORKER_YIELD_MIN_RATE", worker.DefaultYieldMinRate, "while ingest reports store pressure (NOTIFY inbox_ingest_pressure), process fewer envelopes a second, never fewer than this (0: never yield)")
	yieldMinLag := fs.Duration("yield-min-lag", "WORKER_YIELD_MIN_LAG", worker.DefaultYieldMinLag, "yield only when behind: a batch whose longest-waiting job waited less than this between becoming available and being fetched runs at full rate (0: yield whenever ingest reports pressure)")
	yieldMaxLag := fs.Duration("yield-max-lag", "WORKER_YIELD_MAX_LAG", worker.DefaultYieldMaxLag, "yielding defers processing by at most this: a batch whose longest-waiting job waited longer between becoming available and being fetched runs at full rate")
	adminAddr := fs.String("admin-addr", "WORKER_ADMIN_ADDR", "127.0.0.1:9090", "listen address of /metrics, /healthz, /readyz and River UI; loopback unless given (empty: off)")
	purgeEvery := fs.Duration("purge-interval", "WORKER_PURGE_INTERVAL", time.Hour, "how often the retention purge runs (0: never)")
	purgeBodyAfter := fs.Duration("purge-body-after", "WORKER_PURGE_BODY_AFTER", retention.DefaultBodyAfter, "drop the bodies of envelopes stored longer ago than this, a day at a time (failed envelopes keep theirs; bodies held in rows: done/ignored ones processed longer ago)")
	purgeDeleteAfter := fs.Duration("purge-delete-after", "WORKER_PURGE_DELETE_AFTER", retention.DefaultDeleteAfter, "drop the partitions of envelopes stored longer ago than this, with their attempts, duplicates and conflicts (the tombstone window: a delivery id is recognized for this long; at least --purge-body-after)")
	purgeBatch := fs.Int("purge-batch-size", "WORKER_PURGE_BATCH_SIZE", retention.DefaultBatchSize, "bodies per purge transaction")
	partitionWidth := fs.Duration("partition-width", "WORKER_PARTITION_WIDTH", envelope.PartitionDay, "width of the envelope partitions created from now on: 24h (one a day) or 1h (one an hour, for very high volume)")
	completedJobs := fs.Duration("completed-job-retention", "WORKER_COMPLETED_JOB_RETENTION", worker.DefaultCompletedJobRetention, "how long River keeps the row of a job it completed (at least 1m): the periodic reconcile, purge and backfill jobs; a processing job's row is deleted by the transaction that finishes its envelope, whose attempts keep the job's id (River's own default is 24h)")
	consoleOn := fs.Bool("console", false, "serve the operator console at /console/ on the admin listener, behind the same basic auth as River UI (the signed-in user is the replay actor) (env WORKER_CONSOLE=true)")
	adminUsers := fs.String("admin-users", "WORKER_ADMIN_USERS", "", "file of the operators who may sign in to River UI and the console, one name:bcrypt-hash a line (htpasswd -B); each replay records its operator (besides or instead of RIVER_BASIC_AUTH_USER/_PASS)")
	consoleDB := fs.String("console-database-url", "CONSOLE_DATABASE_URL", "", "the console's database, a role that may replay (inbox_admin); default DATABASE_URL (read-only when that role may not replay)")
	consoleReadDB := fs.String("console-read-database-url", "CONSOLE_READ_DATABASE_URL", "", "a hot standby of the database for the console's reads (list, envelope, failures, dry runs); replays still go to --console-database-url; default: that database")
	consoleMax := fs.Int("console-max-replay", "CONSOLE_MAX_REPLAY", console.DefaultMaxReplay, "the most envelopes one replay from the console takes (stated on its page; the CLI has no ceiling)")
	consoleSupervisors := fs.String("console-supervisors", "CONSOLE_SUPERVISORS", "", "comma-separated operators who may stop any operator's console replay (others stop only their own)")
	handlerList := fs.String("handlers", "WORKER_HANDLERS", "", "comma-separated optional handler packages built into this binary to register besides the built-in payments (today: customers, the example of docs/handlers.md); default none")
	riverUI := fs.Bool("riverui", false, "serve River UI at /riverui/ on the admin listener, behind basic auth (user and password: RIVER_BASIC_AUTH_USER/RIVER_BASIC_AUTH_PASS, or RIVERUI_USER/RIVERUI_PASSWORD) (env WORKER_RIVERUI=true)")
	if err := fs.Parse(args); err != nil {
		return o, cli.UsageError{Err: err}
	}
	if fs.NArg() > 0 {
		return o, cli.UsageError{Err: fmt.Errorf("run: unexpected argument %q", fs.Arg(0))}
	}
	o = runOptions{
		maxWorkers: *maxWorkers,
		batching:   worker.Batching{MaxBatch: *batchSize, MaxConcurrent: *batchConcurrency, MaxUnbatched: *unbatched},
		jobTimeout: *jobTimeout, rescueAfter: *rescueAfter, fetchCooldown: *fetchCooldown, fetchPoll: *fetchPoll,
		policy:   worker.Policy{SnoozeDefault: *snoozeDefault, MaxSnooze: *maxSnooze, MaxAge: *maxAge, JobTimeout: *jobTimeout},
		drain:    *drain,
		logLevel: *logLevel, logFormat: *logFormat, cfgPath: *cfgPath, adminAddr: *adminAddr,
		purgeEvery:            *purgeEvery,
		purge:                 retention.PurgeArgs{BodyAfter: *purgeBodyAfter, DeleteAfter: *purgeDeleteAfter, BatchSize: *purgeBatch},
		partitionWidth:        *partitionWidth,
		completedJobRetention: *completedJobs,
		consoleOn:             *consoleOn || getenv("WORKER_CONSOLE") == "true",
		riverUI:               *riverUI || getenv("WORKER_RIVERUI") == "true",
		adminUsers:            *adminUsers,
		yieldMin:              *yieldMin,
		yieldMinLag:           *yieldMinLag,
		yieldMaxLag:           *yieldMaxLag,
		console:               consoleConfig{dbURL: *consoleDB, readURL: *consoleReadDB, maxReplay: *consoleMax, supervisors: *consoleSupervisors},
	}
	var err error
	if o.handlers, err = parseHandlers(*handlerList); err != nil {
		return o, cli.UsageError{Err: err}
	}
	if o.uiUser, err = uiCredential(getenv, "RIVER_BASIC_AUTH_USER", "RIVERUI_USER"); err != nil {
		return o, cli.UsageError{Err: err}
	}
	if o.uiPassword, err = uiCredential(getenv, "RIVER_BASIC_AUTH_PASS", "RIVERUI_PASSWORD"); err != nil {
		return o, cli.UsageError{Err: err}
	}
	if o.uiUser == "" {
		o.uiUser = "admin"
	}
	return o, nil
}

// check applies the rules between flags that need no sources file; each
// refusal is a cli.UsageError.
func (o runOptions) check() error {
	usage := func(err error) error { return cli.UsageError{Err: err} }
	switch {
	case o.console.maxReplay < 1:
		return usage(fmt.Errorf("--console-max-replay %d: must be at least 1", o.console.maxReplay))
	case o.partitionWidth != envelope.PartitionDay && o.partitionWidth != envelope.PartitionHour:
		return usage(fmt.Errorf("--partition-width %s: must be 24h or 1h", o.partitionWidth))
	case o.maxWorkers < 1:
		return usage(errors.New("--max-workers must be at least 1"))
	case o.yieldMin < 0:
		return usage(errors.New("--yield-min-rate must be 0 (never yield) or more"))
	case o.yieldMaxLag < time.Second:
		return usage(fmt.Errorf("--yield-max-lag %s: at least 1s (--yield-min-rate 0 turns yielding off)", o.yieldMaxLag))
	case o.yieldMinLag < 0 || o.yieldMinLag >= o.yieldMaxLag:
		return usage(fmt.Errorf("--yield-min-lag %s: 0 or more, and under --yield-max-lag (%s)", o.yieldMinLag, o.yieldMaxLag))
	case o.completedJobRetention < worker.MinCompletedJobRetention:
		return usage(fmt.Errorf("--completed-job-retention %s: at least %s", o.completedJobRetention, worker.MinCompletedJobRetention))
	case o.batching.MaxBatch < 1 || o.batching.MaxBatch > worker.MaxBatchLimit || o.batching.MaxConcurrent < 1 || o.batching.MaxUnbatched < 1:
		return usage(fmt.Errorf("--batch-size must be 1 to %d, --batch-concurrency and --forward-concurrency at least 1", worker.MaxBatchLimit))
	case o.purgeEvery < 0 || (o.purgeEvery > 0 && o.purgeEvery < time.Minute):
		return usage(errors.New("--purge-interval must be 0 (off) or at least 1m"))
	case o.purge.BodyAfter <= 0 || o.purge.DeleteAfter <= 0 || o.purge.BatchSize <= 0:
		return usage(errors.New("--purge-body-after, --purge-delete-after and --purge-batch-size must be positive"))
	case o.guarded() && ((o.uiPassword == "" && o.adminUsers == "") || o.adminAddr == ""):
		return usage(errors.New("--riverui and --console need RIVER_BASIC_AUTH_PASS (or RIVERUI_PASSWORD) set, or an --admin-users file (River UI can cancel and delete jobs, the console replays), and an --admin-addr"))
	}
	if _, err := o.purge.Config().WithDefaults(); err != nil {
		return usage(err)
	}
	return nil
}

// checkSources applies the rules between the flags and the sources file,
// and returns the options with what the file decides (the rescue delay
// past the longest backfill); each refusal is a cli.UsageError.
func (o runOptions) checkSources(cfg *config.Config) (runOptions, error) {
	usage := func(err error) (runOptions, error) { return o, cli.UsageError{Err: err} }
	if err := reconcileWithinRetention(cfg, o.purge.DeleteAfter); err != nil {
		return usage(err)
	}
	if err := tombstonesOutliveRedeliveries(cfg, o.purge.DeleteAfter); err != nil {
		return usage(err)
	}
	if longest := backfill.MaxTimeout(cfg); longest > 0 {
		switch {
		case o.rescueAfter == 0:
			// River rescues any job kind after one delay: past the longest
			// reconcile, or it would start a second run of one still going.
			o.rescueAfter = max(o.jobTimeout, longest) + time.Minute
		case o.rescueAfter <= longest:
			return usage(fmt.Errorf("--rescue-after %s must exceed the longest backfill timeout %s (a reconcile still running would be rescued and run twice)", durations.Format(o.rescueAfter), durations.Format(longest)))
		}
	}
	if longest := forwardBudget(cfg); longest >= o.jobTimeout {
		return usage(fmt.Errorf("forward timeouts of one source add up to %s, not less than --job-timeout %s: raise the job timeout or lower the forward timeouts", longest, o.jobTimeout))
	}
	return o, nil
}

// sourcePolicies is what the worker applies per source from the file.
func sourcePolicies(cfg *config.Config) map[string]worker.SourcePolicy {
	sources := map[string]worker.SourcePolicy{}
	for name, src := range cfg.Sources {
		sp := worker.SourcePolicy{BackoffMin: src.Backoff.Min, BackoffMax: src.Backoff.Max, MaxAttempts: src.MaxAttempts, MaxAge: src.MaxAge,
			AccountID: src.AccountID}
		if src.Throttle != nil {
			sp.ThrottlePerSecond, sp.ThrottleKey = src.Throttle.PerSecond, string(src.Throttle.Key)
		}
		sources[name] = sp
	}
	return sources
}

// runWorker is worker run: parse and check the command line, load and
// check the sources file, assemble the River client and its jobs, serve
// the admin listener, and process envelopes until ctx ends; then drain.
func runWorker(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	o, err := parseRun(args, getenv, stderr)
	if err != nil {
		return err
	}
	if err := o.check(); err != nil {
		return err
	}
	logger, err := cli.NewLogger(stderr, o.logLevel, o.logFormat)
	if err != nil {
		return cli.UsageError{Err: err}
	}
	worker.TuneGC(getenv)
	stopTracing, err := tracing.Setup(ctx, "inbox-worker", getenv, logger)
	if err != nil {
		return cli.UsageError{Err: err}
	}
	defer tracing.Flush(stopTracing, logger)
	var creds *credentials
	if o.guarded() {
		if o.uiPassword != "" {
			if err := checkUIPassword(o.uiPassword); err != nil {
				return cli.UsageError{Err: err}
			}
		}
		if creds, err = newCredentials(o.uiUser, o.uiPassword, o.adminUsers); err != nil {
			return cli.UsageError{Err: err}
		}
	}
	var periodic []*river.PeriodicJob
	if o.purgeEvery > 0 {
		periodic = append(periodic, retention.PeriodicJob(o.purgeEvery, o.purge))
	}
	sources := map[string]worker.SourcePolicy{}
	var registry handlers.Router = builtinRegistry(o.handlers)
	backfillCfg := &config.Config{}
	if o.cfgPath != "" {
		cfg, err := config.Load(o.cfgPath, getenv)
		if err != nil {
			return err
		}
		if o, err = o.checkSources(cfg); err != nil {
			return err
		}
		backfillCfg = cfg
		periodic = append(periodic, backfill.PeriodicJobs(cfg)...)
		sources = sourcePolicies(cfg)
		if registry, err = forward.FromSources(registry, cfg.Destinations(), nil); err != nil {
			return err
		}
	}
	pool, err := pg.Open(ctx, getenv("DATABASE_URL"), pg.Options{
		MaxConns:        int32(worker.PoolSize(o.batching)),
		IdleInTxTimeout: o.jobTimeout + 10*time.Second,
		ApplicationName: "inbox-worker",
	})
	if err != nil {
		return err
	}
	defer pool.Close()
	reg := metrics.NewRegistry()
	wm := metrics.NewWorker(reg, pool, logger)
	wm.Init(slices.Sorted(maps.Keys(sources)))
	wm.InitRiverKinds(river.QueueDefault, envelope.ProcessArgs{}.Kind(), worker.ReconcileArgs{}.Kind(), retention.PurgeArgs{}.Kind(), backfill.ReconcileArgs{}.Kind())
	bm := metrics.NewBackfill(reg)
	bm.Init(backfill.ReconciledSources(backfillCfg))
	// The reconcile stores recovered events through the envelope store, as
	// ingest does, with an insert-only River client of its own.
	reconcileInserts, err := envelope.NewInsertClient(pool, logger)
	if err != nil {
		return err
	}
	reconcile := &backfill.ReconcileWorker{
		Runner: &backfill.Runner{
			Store:  envelope.NewStoreWith(pool, reconcileInserts, envelope.StoreOptions{MaxConcurrent: 1}),
			Logger: logger,
		},
		Config:      backfillCfg,
		JobTimeout:  o.jobTimeout,
		ObserveFunc: bm.ObserveRun,
	}
	var yield *worker.Yield
	if o.yieldMin > 0 {
		yield = worker.NewYield(float64(o.yieldMin), o.yieldMinLag, o.yieldMaxLag)
		yield.Set, yield.Behind = wm.YieldLimit.Set, wm.YieldBehind.Inc
		yield.Arrivals = func(ctx context.Context) (int64, error) { return envelope.StoredSoFar(ctx, pool) }
		yield.Withheld = wm.YieldWithheld.Add
		go yield.Run(ctx, pool.Config().ConnConfig, envelope.PressureChannel, logger)
	}
	client, err := worker.NewClient(pool, registry, worker.Config{
		PartitionWidth: o.partitionWidth,
		Sources:        sources,
		Metrics:        wm,
		Yield:          yield,
		PeriodicJobs:   periodic,
		Register: func(w *river.Workers) error {
			// Always registered, so a purge job inserted by hand or by an
			// earlier configuration still runs (a reconcile of a source no
			// longer configured is cancelled).
			if err := river.AddWorkerSafely(w, &retention.PurgeWorker{Pool: pool, Logger: logger, JobTimeout: o.jobTimeout}); err != nil {
				return err
			}
			return river.AddWorkerSafely(w, reconcile)
		},
		Policy:                o.policy,
		MaxWorkers:            o.maxWorkers,
		Batching:              o.batching,
		FetchCooldown:         o.fetchCooldown,
		FetchPollInterval:     o.fetchPoll,
		RescueStuckJobsAfter:  o.rescueAfter,
		CompletedJobRetention: o.completedJobRetention,
	}, logger)
	if err != nil {
		return err
	}
	// Start with a context that outlives ctx: cancelling it would cancel
	// running jobs; SIGTERM goes through Stop instead.
	if err := client.Start(context.WithoutCancel(ctx)); err != nil {
		return fmt.Errorf("start: %w", err)
	}
	// inbox_worker_heartbeat_timestamp_seconds: advances while this worker
	// runs and reaches its database; stops at SIGTERM.
	go wm.RunHeartbeat(ctx, 15*time.Second, pool.Ping)
	if o.cfgPath == "" {
		logger.Warn("no sources file (--config / INBOX_CONFIG): forwarding, per-source backoff and throttle are off, and a source's max_attempts holds only for the jobs ingest inserted (not for replayed or reconciled ones); give the worker the same file as ingest")
	}
	logger.Info("worker started", "max_workers", o.maxWorkers, "batch_size", o.batching.MaxBatch, "batch_concurrency", o.batching.MaxConcurrent, "job_timeout", o.jobTimeout.String(), "database", pg.Redact(getenv("DATABASE_URL")))
	var adminErr <-chan error
	if o.adminAddr != "" {
		errc, closeAdmin, err := serveAdmin(ctx, o, creds, client, pool.Ping, reg, getenv, logger)
		if err != nil {
			return err
		}
		defer closeAdmin()
		adminErr = errc
	}
	select {
	case <-ctx.Done():
	case err := <-adminErr:
		logger.Error("admin listener stopped", "error", err)
	}

	logger.Info("worker stopping: no new jobs, waiting for running ones", "timeout", o.drain.String())
	sctx, cancel := context.WithTimeout(context.Background(), o.drain)
	defer cancel()
	if err := client.Stop(sctx); err != nil {
		logger.Warn("running jobs did not finish in time: cancelling them (they roll back and are retried)", "error", err)
		cctx, ccancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer ccancel()
		if err := client.StopAndCancel(cctx); err != nil {
			return fmt.Errorf("stop: %w", err)
		}
	}
	logger.Info("worker stopped")
	return nil
}

// serveAdmin serves /metrics, /healthz and /readyz on o.adminAddr, with
// River UI and the console behind one login guard when asked (a login
// throttled on one is throttled on the other). It returns the listener's
// error channel and what closes it (and the console's pool); on an error,
// nothing is left open.
func serveAdmin(ctx context.Context, o runOptions, creds *credentials, client *river.Client[pgx.Tx], ping func(context.Context) error,
	reg *prometheus.Registry, getenv func(string) string, logger *slog.Logger) (<-chan error, func(), error) {
	mux := metrics.AdminMux(reg, ping)
	ui := http.NewServeMux()
	var closers []func()
	closeAll := func() {
		for _, c := range slices.Backward(closers) {
			c()
		}
	}
	if o.riverUI {
		h, err := riverui.NewHandler(&riverui.HandlerOpts{
			Endpoints: riverui.NewEndpoints(client, nil),
			Logger:    logger,
			Prefix:    "/riverui",
		})
		if err != nil {
			return nil, nil, fmt.Errorf("river ui: %w", err)
		}
		if err := h.Start(ctx); err != nil {
			return nil, nil, fmt.Errorf("river ui: %w", err)
		}
		ui.Handle("/riverui/", h)
	}
	if o.consoleOn {
		riverPath := ""
		if o.riverUI {
			riverPath = "/riverui"
		}
		con, closeConsole, err := newConsole(ctx, o.console, getenv, client, riverPath, reg, logger)
		if err != nil {
			return nil, nil, err
		}
		closers = append(closers, closeConsole)
		ui.Handle(console.Prefix+"/", con)
	}
	if o.guarded() {
		g := guardUI(creds, ui, logger)
		if o.riverUI {
			mux.Handle("/riverui/", g)
		}
		if o.consoleOn {
			mux.Handle(console.Prefix+"/", g)
		}
	}
	adminSrv, bound, errc, err := cli.Listen(o.adminAddr, mux, 60*time.Second)
	if err != nil {
		closeAll()
		return nil, nil, err
	}
	closers = append(closers, func() { adminSrv.Close() })
	logger.Info("admin listening", "addr", bound, "riverui", o.riverUI, "console", o.consoleOn)
	if o.guarded() && !loopback(bound) {
		logger.Warn("River UI and the console are served over plain HTTP beyond loopback: their password crosses the network in clear; reach it through TLS or an SSH tunnel (docs/operations.md)", "addr", bound)
	}
	return errc, closeAll, nil
}

// forwardBudget is the largest sum of forward timeouts of any one source: a
// delivery to every destination of a source must fit in one job attempt.
func forwardBudget(cfg *config.Config) time.Duration {
	var longest time.Duration
	for _, src := range cfg.Sources {
		var sum time.Duration
		for _, f := range src.Forward {
			sum += f.Timeout
		}
		longest = max(longest, sum)
	}
	return longest
}

// tombstonesOutliveRedeliveries refuses a tombstone window
// (--purge-delete-after) not longer than a configured provider's
// redelivery window: a retry arriving after its envelope's partition was
// dropped would be stored and processed again.
func tombstonesOutliveRedeliveries(cfg *config.Config, deleteAfter time.Duration) error {
	for _, name := range cfg.Names() {
		p := cfg.Sources[name].Provider
		if w := provider.RedeliveryWindow(p); deleteAfter <= w {
			return fmt.Errorf("source %q: --purge-delete-after %s is not longer than %s's redelivery window %s: a delivery sent again after its envelope was deleted would be stored and processed twice; raise --purge-delete-after",
				name, durations.Format(deleteAfter), p, durations.Format(w))
		}
	}
	return nil
}

// reconcileWithinRetention refuses a periodic reconcile whose window
// reaches further back than the purge deletes envelopes: an event processed
// and then deleted has no envelope, so the reconcile would take it for
// never delivered and store (and process) it again.
func reconcileWithinRetention(cfg *config.Config, deleteAfter time.Duration) error {
	for _, name := range cfg.Names() {
		src := cfg.Sources[name]
		if src.Backfill == nil || src.Backfill.Every <= 0 {
			continue
		}
		if w := backfill.Window(src); w >= deleteAfter {
			return fmt.Errorf("source %q: backfill window %s is not shorter than --purge-delete-after %s: events whose envelopes the purge deleted would look never delivered and be stored and processed again; shorten the window or raise --purge-delete-after", name, w, deleteAfter)
		}
	}
	return nil
}

// newConsole opens the console's own small pool (its queries and replays
// never take a batch's connection) on dbURL, or on DATABASE_URL, and
// returns the console, read-only when that role may not replay.
// consoleConfig is what the console's flags say.
type consoleConfig struct {
	dbURL       string
	readURL     string // a standby for the reads, "" for none
	maxReplay   int
	supervisors string // comma-separated operator names
}

func newConsole(ctx context.Context, cc consoleConfig, getenv func(string) string, jobs admin.JobInserter, riverPath string, reg prometheus.Registerer, logger *slog.Logger) (*console.Console, func(), error) {
	dbURL := cc.dbURL
	if dbURL == "" {
		dbURL = getenv("DATABASE_URL")
	}
	// A statement runs at most 30 s (a body search no index serves scans);
	// a session idle in a transaction is ended, as the worker's are.
	pool, err := pg.Open(ctx, dbURL, pg.Options{MaxConns: 4, ApplicationName: "inbox-console",
		StatementTimeout: 30 * time.Second, IdleInTxTimeout: time.Minute})
	if err != nil {
		return nil, nil, fmt.Errorf("console: %w", err)
	}
	opts := console.Options{
		Pool:    pool,
		Jobs:    jobs,
		Actor:   func(r *http.Request) string { u, _, _ := r.BasicAuth(); return u },
		RiverUI: riverPath,
		Logger:  logger,
		Context: ctx,

		MaxReplay:   cc.maxReplay,
		Supervisors: map[string]bool{},
	}
	for _, name := range strings.Split(cc.supervisors, ",") {
		if name = strings.TrimSpace(name); name != "" {
			opts.Supervisors[name] = true
		}
	}
	can, err := admin.CanReplay(ctx, pool)
	if err != nil {
		pool.Close()
		return nil, nil, fmt.Errorf("console: %w", err)
	}
	if !can {
		opts.ReadOnly = true
		opts.ReadOnlyReason = "this database role may not record replays; give the console an inbox_admin login with --console-database-url (CONSOLE_DATABASE_URL)"
		logger.Warn("console is read-only: its database role may not replay", "database", pg.Redact(dbURL))
	}
	closeAll := pool.Close
	if cc.readURL != "" {
		read, err := pg.Open(ctx, cc.readURL, pg.Options{MaxConns: 4, ApplicationName: "inbox-console-read",
			StatementTimeout: 30 * time.Second, IdleInTxTimeout: time.Minute})
		if err != nil {
			pool.Close()
			return nil, nil, fmt.Errorf("console read database: %w", err)
		}
		opts.ReadPool = read
		closeAll = func() { read.Close(); pool.Close() }
		metrics.RegisterReadLag(reg, func(ctx context.Context) (time.Duration, error) {
			lag, err := admin.ReadLag(ctx, read)
			return lag.Behind, err
		})
		logger.Info("console reads a standby", "database", pg.Redact(cc.readURL))
	}
	con, err := console.New(opts)
	if err != nil {
		closeAll()
		return nil, nil, err
	}
	return con, closeAll, nil
}
