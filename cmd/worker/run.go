package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/inboxhq/inbox/internal/cli"
	"github.com/inboxhq/inbox/internal/handlers"
	"github.com/inboxhq/inbox/internal/pg"
	"github.com/inboxhq/inbox/internal/worker"
)

func runWorker(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := cli.NewFlags("worker run", getenv, stderr)
	maxWorkers := fs.Int("max-workers", "WORKER_MAX_WORKERS", 10, "envelopes processed at once")
	jobTimeout := fs.Duration("job-timeout", "WORKER_JOB_TIMEOUT", time.Minute, "bound on one processing attempt (never disabled)")
	rescueAfter := fs.Duration("rescue-after", "WORKER_RESCUE_AFTER", 0, "rescue a job whose worker died after this long (default job timeout + 1m; must exceed it)")
	fetchCooldown := fs.Duration("fetch-cooldown", "WORKER_FETCH_COOLDOWN", 0, "River fetch cooldown (default 100ms)")
	fetchPoll := fs.Duration("fetch-poll-interval", "WORKER_FETCH_POLL_INTERVAL", 0, "River fetch poll interval (default 1s)")
	snoozeDefault := fs.Duration("snooze", "WORKER_SNOOZE", worker.DefaultPolicy.SnoozeDefault, "wait of a not-ready envelope")
	maxSnooze := fs.Duration("max-snooze", "WORKER_MAX_SNOOZE", worker.DefaultPolicy.MaxSnooze, "cap on one snooze (downstream Retry-After included)")
	maxAge := fs.Duration("max-age", "WORKER_MAX_AGE", worker.DefaultPolicy.MaxAge, "an envelope older than this fails instead of snoozing again")
	drain := fs.Duration("shutdown-timeout", "WORKER_SHUTDOWN_TIMEOUT", 30*time.Second, "how long SIGTERM lets running jobs finish")
	logLevel := fs.String("log-level", "LOG_LEVEL", "info", "debug, info, warn or error")
	logFormat := fs.String("log-format", "LOG_FORMAT", "json", "json or text")
	if err := fs.Parse(args); err != nil {
		return usageError{err}
	}
	if fs.NArg() > 0 {
		return usageError{fmt.Errorf("run: unexpected argument %q", fs.Arg(0))}
	}
	logger, err := cli.NewLogger(stderr, *logLevel, *logFormat)
	if err != nil {
		return usageError{err}
	}
	if *maxWorkers < 1 {
		return usageError{errors.New("--max-workers must be at least 1")}
	}
	pool, err := pg.Open(ctx, getenv("DATABASE_URL"), pg.Options{
		MaxConns:        int32(*maxWorkers + 5),
		IdleInTxTimeout: *jobTimeout + 10*time.Second,
		ApplicationName: "inbox-worker",
	})
	if err != nil {
		return err
	}
	defer pool.Close()
	client, err := worker.NewClient(pool, handlers.Builtin(), worker.Config{
		Policy: worker.Policy{
			SnoozeDefault: *snoozeDefault,
			MaxSnooze:     *maxSnooze,
			MaxAge:        *maxAge,
			JobTimeout:    *jobTimeout,
		},
		MaxWorkers:           *maxWorkers,
		FetchCooldown:        *fetchCooldown,
		FetchPollInterval:    *fetchPoll,
		RescueStuckJobsAfter: *rescueAfter,
	}, logger)
	if err != nil {
		return err
	}
	// Start with a context that outlives ctx: cancelling it would cancel
	// running jobs; SIGTERM goes through Stop instead.
	if err := client.Start(context.WithoutCancel(ctx)); err != nil {
		return fmt.Errorf("start: %w", err)
	}
	logger.Info("worker started", "max_workers", *maxWorkers, "job_timeout", jobTimeout.String(), "database", pg.Redact(getenv("DATABASE_URL")))
	fmt.Fprintln(stdout, "worker started")
	<-ctx.Done()

	logger.Info("worker stopping: no new jobs, waiting for running ones", "timeout", drain.String())
	sctx, cancel := context.WithTimeout(context.Background(), *drain)
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
