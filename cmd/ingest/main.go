// Command ingest serves POST /webhooks/{source}: it verifies each delivery's
// signature, stores it as an envelope with its processing job in one
// transaction, and answers 2xx only after COMMIT.
package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inboxhq/inbox/internal/cli"
	"github.com/inboxhq/inbox/internal/config"
	"github.com/inboxhq/inbox/internal/envelope"
	"github.com/inboxhq/inbox/internal/ingest"
	"github.com/inboxhq/inbox/internal/ingest/ingestconfig"
	"github.com/inboxhq/inbox/internal/metrics"
	"github.com/inboxhq/inbox/internal/pg"
	"github.com/inboxhq/inbox/internal/tracing"
)

func main() { cli.Main("ingest", run, nil) }

// run starts ingest and serves until ctx is cancelled, then drains in-flight
// requests and returns nil.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	// Logs carry strings a sender chose: escape what could drive a terminal.
	stdout, stderr = cli.Safe(stdout), cli.Safe(stderr)
	fs := cli.NewFlags("ingest", getenv, stderr)
	addr := fs.String("addr", "INGEST_ADDR", ":8080", "listen address")
	cfgPath := fs.String("config", "INBOX_CONFIG", "", "sources YAML file")
	storeTimeout := fs.Duration("store-timeout", "INGEST_STORE_TIMEOUT", ingest.DefaultStoreTimeout, "store deadline: every delivery is answered within it of its arrival, past it with 503 (keep it under the shortest provider timeout: Shopify's 5 s)")
	shedAfter := fs.Duration("shed-after", "INGEST_SHED_AFTER", 0, "refuse deliveries at once (503) while the oldest one being stored has waited longer than this: a stalled or saturated database (default 250ms, at most a third of --store-timeout; negative: never)")
	shedAfterOverload := fs.Duration("shed-after-overload", "INGEST_SHED_AFTER_OVERLOAD", 0, "once a delivery was refused for --shed-after (more offered than the database commits), refuse past this shorter store queue age instead, until a second passes with none refused: accepted deliveries wait about this long, not --shed-after (default 70ms, or twice --pressure-target or a quarter of --shed-after when more; at most --shed-after, above --pressure-target; negative: never)")
	maxConns := fs.Int("db-max-conns", "INGEST_DB_MAX_CONNS", 20, "database pool size (at least --store-concurrency + 2)")
	storeBatch := fs.Int("store-batch", "INGEST_STORE_BATCH", 64, "most deliveries one transaction stores: deliveries arriving while a commit is in flight share the next one (1: one transaction each)")
	storeConcurrency := fs.Int("store-concurrency", "INGEST_STORE_CONCURRENCY", 2, "store transactions in flight at once (default from measurement: docs/benchmarks.md)")
	drain := fs.Duration("shutdown-timeout", "INGEST_SHUTDOWN_TIMEOUT", 20*time.Second, "how long SIGTERM waits for in-flight requests")
	logLevel := fs.String("log-level", "LOG_LEVEL", "info", "debug, info, warn or error")
	logFormat := fs.String("log-format", "LOG_FORMAT", "json", "json or text")
	pressureTarget := fs.Duration("pressure-target", "INGEST_PRESSURE_TARGET", ingest.DefaultPressureTarget, "while the oldest delivery being stored has waited longer than this for --pressure-interval, ask workers to yield the database (NOTIFY inbox_ingest_pressure); nothing is refused for it (0: the default; negative: never)")
	pressureInterval := fs.Duration("pressure-interval", "INGEST_PRESSURE_INTERVAL", ingest.DefaultPressureInterval, "how long the store queue must stand above --pressure-target, and how often the workers are told while it does")
	pressureSurge := fs.Float("pressure-surge", "INGEST_PRESSURE_SURGE", ingest.DefaultPressureSurge, "under pressure, a rate offered over this many times the calm one (offered lately without pressure) is a surge: workers yield at once, even those keeping up, instead of once they fall behind (0: the default; negative: never)")
	adminAddr := fs.String("admin-addr", "INGEST_ADMIN_ADDR", "127.0.0.1:9091", "listen address of /metrics, /healthz and /readyz; loopback unless given (empty: off)")
	maxConnsOpen := fs.Int("max-conns", "INGEST_MAX_CONNS", defaultMaxConns, "connections open at once on --addr; from 7/8 of it answers close their connection, at the cap the one longest idle (250ms or more) is closed for a new one, and when none is a new one's request is answered 503 at once")
	maxBodies := fs.Int("max-inflight-body-bytes", "INGEST_MAX_INFLIGHT_BODY_BYTES", ingest.DefaultMaxInflightBodyBytes, "request bodies held in memory at once, beyond 16 KiB each; past it a delivery waits briefly, then gets 503")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return cli.UsageError{Err: fmt.Errorf("unexpected argument %q", fs.Arg(0))}
	}
	logger, err := cli.NewLogger(stderr, *logLevel, *logFormat)
	if err != nil {
		return err
	}
	stopTracing, err := tracing.Setup(ctx, "inbox-ingest", getenv, logger)
	if err != nil {
		return err
	}
	defer tracing.Flush(stopTracing, logger)
	if *cfgPath == "" {
		return errors.New("no sources file: set --config or INBOX_CONFIG")
	}
	opts := ingest.Options{StoreTimeout: *storeTimeout, ShedAfter: *shedAfter, ShedAfterOverload: *shedAfterOverload, PressureTarget: *pressureTarget, PressureInterval: *pressureInterval, PressureSurge: *pressureSurge,
		MaxInflightBodyBytes: int64(*maxBodies)}
	// The rules hold between the limits that run (defaults resolved), but
	// on the deadline, interval and overload limit as given: zero there is
	// refused, and an overload limit past --shed-after is refused, not
	// shortened.
	eff := opts.WithDefaults()
	if err := (limits{storeTimeout: *storeTimeout, shedAfter: eff.ShedAfter, shedAfterOverload: cmp.Or(*shedAfterOverload, eff.ShedAfterOverload),
		pressureTarget: eff.PressureTarget, pressureInterval: *pressureInterval, pressureSurge: *pressureSurge, maxConnsOpen: *maxConnsOpen, maxBodies: *maxBodies,
		storeBatch: *storeBatch, storeConcurrency: *storeConcurrency, dbMaxConns: *maxConns}).check(); err != nil {
		return err
	}
	cfg, err := config.Load(*cfgPath, getenv)
	if err != nil {
		return err
	}
	pool, err := pg.Open(ctx, getenv("DATABASE_URL"), pg.Options{
		MaxConns: int32(*maxConns),
		// The store's transactions find their connections open: a burst
		// right after a start (or a database restart) does not wait for
		// connects, which the store queue age would count.
		MinConns:         int32(*storeConcurrency + 1),
		StatementTimeout: *storeTimeout,
		// A frozen ingest must not keep a delivery id locked: the server
		// ends its open transaction, and the provider's resend goes through.
		IdleInTxTimeout: *storeTimeout + 5*time.Second,
		ApplicationName: "inbox-ingest",
		// The store's insert is planned once per connection, not on every
		// batch (see pg.Options.GenericPlans).
		GenericPlans: true,
	})
	if err != nil {
		return err
	}
	defer pool.Close()
	riverClient, err := envelope.NewInsertClient(pool, logger)
	if err != nil {
		return err
	}
	reg := metrics.NewRegistry()
	m := metrics.NewIngest(reg)
	m.Init(cfg.Names())
	store := envelope.NewStoreWith(pool, riverClient, envelope.StoreOptions{MaxBatch: *storeBatch, MaxConcurrent: *storeConcurrency})
	sources, err := ingestconfig.Sources(cfg)
	if err != nil {
		return err
	}
	opts.Observe = m.Observe
	srv, err := ingest.New(sources, store, logger, opts)
	if err != nil {
		return err
	}
	m.RegisterInflightBodyBytes(reg, srv.InflightBodyBytes)
	m.RegisterStoreQueue(reg, metrics.StoreQueue{
		Age: store.QueueAge, Limit: srv.ShedLimit, Holds: srv.OverloadHolds, Surges: srv.PressureSurges,
		ShedAfter: srv.ShedAfter(), Overload: srv.ShedAfterOverload(), PressureTarget: srv.PressureTarget(),
	})
	go srv.RunPressure(ctx, m.SetStorePressure)

	// Say at once when the database does not answer: ingest keeps serving
	// (each delivery gets 503 with Retry-After, and /readyz fails, until it
	// does), but an operator should not learn it from the first provider
	// retry. A database that answers but holds no inbox schema is a wrong
	// DATABASE_URL or a missing migration: refuse to start rather than
	// answer every delivery 500.
	pingCtx, cancelPing := context.WithTimeout(ctx, 3*time.Second)
	var hasSchema bool
	if err := pool.QueryRow(pingCtx, `SELECT to_regclass('envelope') IS NOT NULL`).Scan(&hasSchema); err != nil {
		logger.Warn("database unreachable at start: deliveries get 503 and /readyz fails until it answers",
			"database", pg.Redact(getenv("DATABASE_URL")), "error", err) // pgconn names host, user and database, never the password
	} else if !hasSchema {
		cancelPing()
		return pg.NoSchema(getenv("DATABASE_URL"), `relation "envelope" does not exist`)
	}
	cancelPing()
	// Keep the envelope partitions ahead too (at the newest one's width),
	// so a worker down for days never leaves ingest without one.
	go keepPartitions(ctx, pool, logger)
	httpSrv, bound, errc, err := cli.ListenLimited(*addr, srv, 20*time.Second,
		cli.Limits{MaxConns: *maxConnsOpen, Evicted: m.ConnectionsEvicted.Inc, Overflow: srv.Refuse(), CloseAt: closeAt(*maxConnsOpen)})
	if err != nil {
		return err
	}
	logger.Info("ingest listening", "addr", bound, "sources", cfg.Names(), "database", pg.Redact(getenv("DATABASE_URL")))
	var adminErr <-chan error
	if *adminAddr != "" {
		adminSrv, adminBound, aerr, err := cli.Listen(*adminAddr, metrics.AdminMux(reg, pool.Ping), 30*time.Second)
		if err != nil {
			return err
		}
		defer adminSrv.Close()
		adminErr = aerr
		logger.Info("admin listening", "addr", adminBound)
	}

	select {
	case err := <-errc:
		return fmt.Errorf("serve: %w", err)
	case err := <-adminErr:
		return fmt.Errorf("serve admin: %w", err)
	case <-ctx.Done():
	}
	logger.Info("ingest shutting down: draining in-flight requests", "timeout", drain.String())
	sctx, cancel := context.WithTimeout(context.Background(), *drain)
	defer cancel()
	if err := httpSrv.Shutdown(sctx); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	logger.Info("ingest stopped")
	return nil
}

// keepPartitions creates the envelope partitions missing for the days ahead
// now and every hour until ctx ends, as the worker's reconcile does every
// minute; a failure is logged and retried the next hour.
func keepPartitions(ctx context.Context, pool *pgxpool.Pool, logger *slog.Logger) {
	for {
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		n, err := envelope.EnsurePartitions(cctx, pool, envelope.DefaultPartitionsAhead, 0)
		cancel()
		switch {
		case err != nil && ctx.Err() == nil:
			logger.Warn("create envelope partitions ahead", "error", err)
		case n > 0:
			logger.Info("created envelope partitions", "partitions", n)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Hour):
		}
	}
}

// limits are ingest's flags that constrain one another.
type limits struct {
	storeTimeout, shedAfter, shedAfterOverload                        time.Duration
	pressureTarget, pressureInterval                                  time.Duration
	pressureSurge                                                     float64
	maxConnsOpen, maxBodies, storeBatch, storeConcurrency, dbMaxConns int
}

// check applies every rule between ingest's flags, before anything is
// opened; each refusal is a cli.UsageError (exit status 2).
func (l limits) check() error {
	switch {
	case l.storeTimeout <= 0 || l.shedAfter >= l.storeTimeout:
		return cli.UsageError{Err: errors.New("--store-timeout must be positive, and --shed-after below it (a queue that old is refused; negative: never refuse on it)")}
	case l.pressureInterval < 10*time.Millisecond || (l.pressureTarget > 0 && l.shedAfter > 0 && l.pressureTarget >= l.shedAfter):
		return cli.UsageError{Err: errors.New("--pressure-interval must be at least 10ms, and --pressure-target below --shed-after (workers yield before deliveries are refused; negative: never)")}
	case l.shedAfter > 0 && (l.shedAfterOverload > l.shedAfter || (l.shedAfterOverload > 0 && l.pressureTarget > 0 && l.shedAfterOverload <= l.pressureTarget)):
		return cli.UsageError{Err: errors.New("--shed-after-overload must be at most --shed-after (the limit once refusing is the shorter) and above --pressure-target (the age a healthy store stays under; negative: never)")}
	case math.IsNaN(l.pressureSurge) || math.IsInf(l.pressureSurge, 0) || (l.pressureSurge > 0 && l.pressureSurge <= 1):
		return cli.UsageError{Err: errors.New("--pressure-surge must be a finite number over 1 (a rate offered that many times the calm one; 0: the default; negative: never)")}
	case l.maxConnsOpen < 1 || l.maxBodies < ingest.FreeBodyBytes:
		return cli.UsageError{Err: errors.New("--max-conns must be at least 1 and --max-inflight-body-bytes at least 16384")}
	case l.storeBatch < 1 || l.storeConcurrency < 1 || l.dbMaxConns < l.storeConcurrency+2:
		return cli.UsageError{Err: errors.New("--store-batch and --store-concurrency must be at least 1, and --db-max-conns at least --store-concurrency + 2")}
	}
	return nil
}

// defaultMaxConns is --max-conns's default. The cap must stay above the
// offered rate times the latency of a transient (a peak's first seconds, a
// checkpoint): past it answers close their connections, every request
// opens a new one, and the CPU that costs keeps the latency up. At twice a
// two-core machine's sustained rate (2,400/s), 1,024 (427 ms of headroom)
// collapsed for 9-30 s with thousands of requests unanswered, and 2,048 and
// 4,096 did not (docs/benchmarks.md, "The connection cap at twice the
// rate"). Its memory: bodies at most 16 KiB a connection beyond
// --max-inflight-body-bytes (128 MiB at the defaults), and about 16 KiB of
// buffers and stack a connection (64 MiB more).
const defaultMaxConns = 4096

// closeAt is how many connections open make ingest's answers close their
// connection (cli.Limits.CloseAt): seven eighths of --max-conns, so that
// near the cap senders stop keeping connections the cap would evict
// (their next request on one would fail instead of being answered).
func closeAt(maxConns int) int { return max(1, maxConns-maxConns/8) }
