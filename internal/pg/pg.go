// Package pg opens the PostgreSQL pool every binary uses, with bounded
// connect and statement times so an unreachable database fails fast instead
// of hanging a request or a job. It imports nothing of this module.
package pg

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Options tune a pool; zero values keep the defaults.
type Options struct {
	MaxConns int32
	// MinConns connections are opened in the background at start and kept
	// (restored within the 5 s health check after one is lost), so that the
	// first requests after a start or a database restart do not wait for a
	// connection. Default 0: the pool connects on first use.
	MinConns int32
	// ConnectTimeout bounds one connection attempt. Default 2 s.
	ConnectTimeout time.Duration
	// StatementTimeout is the server-side statement_timeout. Default none.
	StatementTimeout time.Duration
	// IdleInTxTimeout is idle_in_transaction_session_timeout: the server ends
	// a session left idle inside a transaction this long (a frozen process
	// then holds no locks). Default none.
	IdleInTxTimeout time.Duration
	// ApplicationName shows in pg_stat_activity.
	ApplicationName string
	// GenericPlans sets plan_cache_mode = force_generic_plan: each prepared
	// statement is planned once per connection, never again per call. Left
	// to itself, PostgreSQL plans a statement anew on every call when its
	// first five plans looked cheaper than the generic one, which it
	// decides from those calls' batch sizes; for ingest's insert that is
	// 0.8 ms of planning per call, or nothing, depending on the first five
	// batches after a connect (docs/benchmarks.md, "CPU and WAL per
	// envelope"). For a pool whose statements need no plan made for their
	// values (partitions are pruned at run time).
	GenericPlans bool
}

// GINPendingListLimit is the gin_pending_list_limit every pool's sessions
// get while theirs is PostgreSQL's default (4MB): how large a GIN index's
// list of pending entries grows before the session whose insert passes it
// merges the list into the index, inside that insert's statement. The
// envelope tables' GIN indexes (bodies, 00203; headers, 00204) fill 4 MB
// within seconds at full rate, and its merge held ingest's insert for
// 270-600 ms (past --shed-after: refusals); at 256 kB the longest insert
// took 99-182 ms, for ~3 % more WAL (docs/benchmarks.md, "River jobs
// deleted, not completed, and smaller GIN pending lists").
//
// It is set by a statement after connecting, not as a startup parameter (a
// connection pooler such as PgBouncer refuses startup parameters it does
// not know), and only over the default: a value the operator set anywhere
// (the URL, options=-c, ALTER ROLE or DATABASE, postgresql.conf) stays.
const GINPendingListLimit = "256kB"

// setGINPendingListLimit runs on each new connection.
const setGINPendingListLimit = `SELECT set_config('gin_pending_list_limit', '` + GINPendingListLimit + `', false)
	 WHERE current_setting('gin_pending_list_limit') = '4MB'`

// ErrNoURL is returned when DATABASE_URL is empty.
var ErrNoURL = errors.New("DATABASE_URL is not set")

// Open parses databaseURL and returns a pool. It does not wait for the
// database to be reachable: the pool connects on first use (and opens
// Options.MinConns in the background).
func Open(ctx context.Context, databaseURL string, o Options) (*pgxpool.Pool, error) {
	if databaseURL == "" {
		return nil, ErrNoURL
	}
	cfg, err := pgxpool.ParseConfig(databaseURL)
	if err != nil {
		// pgx's message can quote the URL, password included.
		return nil, errors.New("DATABASE_URL is not a valid PostgreSQL connection string")
	}
	if o.MaxConns > 0 {
		cfg.MaxConns = o.MaxConns
	}
	if o.MinConns > 0 {
		cfg.MinConns = min(o.MinConns, cfg.MaxConns)
	}
	cfg.ConnConfig.ConnectTimeout = o.ConnectTimeout
	if cfg.ConnConfig.ConnectTimeout <= 0 {
		cfg.ConnConfig.ConnectTimeout = 2 * time.Second
	}
	cfg.HealthCheckPeriod = 5 * time.Second
	rp := cfg.ConnConfig.RuntimeParams
	if o.StatementTimeout > 0 {
		rp["statement_timeout"] = strconv.FormatInt(o.StatementTimeout.Milliseconds(), 10)
	}
	if o.IdleInTxTimeout > 0 {
		rp["idle_in_transaction_session_timeout"] = strconv.FormatInt(o.IdleInTxTimeout.Milliseconds(), 10)
	}
	if o.ApplicationName != "" {
		rp["application_name"] = o.ApplicationName
	}
	if o.GenericPlans {
		rp["plan_cache_mode"] = "force_generic_plan"
	}
	cfg.AfterConnect = func(ctx context.Context, c *pgx.Conn) error {
		if _, err := c.Exec(ctx, setGINPendingListLimit); err != nil {
			return fmt.Errorf("set gin_pending_list_limit: %w", err)
		}
		return nil
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("open pool: %w", err)
	}
	return pool, nil
}

// Querier is what a function that only reads needs: a pool, a connection or
// a transaction (pgx.Tx, *pgx.Conn and *pgxpool.Pool all satisfy it).
// Functions that must hold locks take a pgx.Tx instead. It is the one
// definition the packages that read share (envelope, ledger, the test
// helpers).
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

var (
	_ Querier = (*pgxpool.Pool)(nil)
	_ Querier = (*pgx.Conn)(nil)
	_ Querier = pgx.Tx(nil)
)

// PlanEachCall, passed as a query's first argument, has PostgreSQL plan the
// statement with its values at every call: pgx sends it as the unnamed
// statement (its description cached, one round trip), never as a named
// prepared statement whose plan the server may cache.
//
// The worker's statements that find rows of a batch by id run this way. A
// connection's cached plan is made in its first calls, and with the tables
// as they were then: while they are empty, a sequential scan of every
// partition (or of river_job), or a walk of a status index, is the cheapest
// plan. PostgreSQL replaces it only when an ANALYZE or a change of schema
// invalidates it, and a backlog left by a peak grows far faster than that:
// the cached plans then cost O(backlog) a batch, and the backlog drains at a
// fraction of the worker's rate. Planned at each call, a statement on ids
// prunes to the partitions that hold them and uses the primary key once a
// partition is large, statistics or not. The price is the planning: about
// 1 ms of PostgreSQL's CPU a batch of 60 (0.4-0.5 ms each for the lock and
// the finish), 8-14 % of the worker's full rate on a backlog that was there
// when its connections were made (docs/benchmarks.md, "The worker's plans").
// The reads built from an envelope selection run this way too
// (envelope.CustomPlan): their best plan depends on their values; and so
// does the reconcile's search for orphans (envelope.Orphans), whose generic
// plan cannot use river_job's partial index for a kind given as a parameter.
const PlanEachCall = pgx.QueryExecModeCacheDescribe
