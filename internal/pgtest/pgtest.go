// Package pgtest gives tests a real, migrated PostgreSQL database of their
// own, and the scaffolding the module's tests share: Eventually, the one way
// a test waits for a condition; Count and Scalar for a query of one value;
// Tx, a transaction rolled back when the test ends. It is for tests only.
//
// The waiting helper lives here rather than in a package of its own because
// nearly every test that waits is waiting for the database (a status, a
// job, a lock) and already imports pgtest; packages whose tests need no
// database (groupcommit) keep testify's require.Eventually.
//
// The first call in a test binary makes sure a template database migrated to
// the current schema exists (its name carries a hash of the migration files,
// so a schema change makes a new one), then every NewDB call clones it with
// CREATE DATABASE ... TEMPLATE, which takes tens of milliseconds. The server
// comes from TEST_DATABASE_URL, default
// postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable.
package pgtest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inboxhq/inbox/internal/pg"
	"github.com/inboxhq/inbox/migrations"
)

// DefaultURL is the server used when TEST_DATABASE_URL is unset.
const DefaultURL = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"

var (
	templateOnce sync.Once
	templateName string
	templateErr  error
	dbCounter    atomic.Int64
)

// ServerURL returns the URL of the test server's maintenance database.
func ServerURL() string {
	if u := os.Getenv("TEST_DATABASE_URL"); u != "" {
		return u
	}
	return DefaultURL
}

// WithDatabase returns base with its database name replaced.
func WithDatabase(base, name string) string {
	u, err := url.Parse(base)
	if err != nil {
		panic(fmt.Sprintf("pgtest: bad URL: %v", err))
	}
	u.Path = "/" + name
	return u.String()
}

func schemaHash() (string, error) {
	h := sha256.New()
	var names []string
	err := fs.WalkDir(migrations.FS(), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			names = append(names, p)
		}
		return nil
	})
	if err != nil {
		return "", err
	}
	sort.Strings(names)
	for _, n := range names {
		b, err := fs.ReadFile(migrations.FS(), n)
		if err != nil {
			return "", err
		}
		fmt.Fprintf(h, "%s\x00%d\x00", n, len(b))
		h.Write(b)
	}
	return hex.EncodeToString(h.Sum(nil))[:12], nil
}

func ensureTemplate(ctx context.Context) (string, error) {
	sum, err := schemaHash()
	if err != nil {
		return "", fmt.Errorf("hash migrations: %w", err)
	}
	// One template a UTC day: a template keeps the envelope partitions of
	// the day it was made, and on a long-lived server one made weeks ago
	// would hand every test database weeks-old empty partitions, which
	// retention and purge tests would then find past their cutoffs.
	// Yesterday's is dropped as any unused template is (templateKeep).
	name := "inbox_tpl_" + sum + "_" + time.Now().UTC().Format("20060102")
	admin, err := pgx.Connect(ctx, ServerURL())
	if err != nil {
		return "", fmt.Errorf("connect to test server %s (set TEST_DATABASE_URL, or run scripts/dev-db start): %w", redact(ServerURL()), err)
	}
	defer admin.Close(ctx)
	// Test binaries of several packages run at once: one makes the template.
	if _, err := admin.Exec(ctx, "SELECT pg_advisory_lock(7283911)"); err != nil {
		return "", err
	}
	defer admin.Exec(context.Background(), "SELECT pg_advisory_unlock(7283911)") //nolint:errcheck
	// Templates of other schemas are dropped once nothing has made one for
	// templateKeep: a concurrent run of another checkout (another branch's
	// migrations) makes databases from its own between our statements, and
	// must not lose it mid-run. Each template is stamped with when it was
	// made or last used (its comment); an unstamped one is from before.
	if _, err := admin.Exec(ctx, "COMMENT ON DATABASE "+pgx.Identifier{name}.Sanitize()+" IS '"+templateStamp+strconv.FormatInt(time.Now().Unix(), 10)+"'"); err != nil {
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "3D000" {
			return "", err
		}
	}
	rows, err := admin.Query(ctx, `
		SELECT datname FROM pg_database
		 WHERE datname LIKE 'inbox\_tpl\_%' AND datname <> $1
		   AND coalesce(substring(shobj_description(oid, 'pg_database') FROM '^`+templateStamp+`([0-9]+)$')::bigint, 0) < $2`,
		name, time.Now().Add(-templateKeep).Unix())
	if err != nil {
		return "", err
	}
	stale, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return "", err
	}
	for _, old := range stale {
		id := pgx.Identifier{old}.Sanitize()
		if _, err := admin.Exec(ctx, "ALTER DATABASE "+id+" WITH is_template = false"); err != nil {
			continue
		}
		if _, err := admin.Exec(ctx, "DROP DATABASE "+id); err != nil {
			// In use (a concurrent run of another checkout): keep it usable.
			_, _ = admin.Exec(ctx, "ALTER DATABASE "+id+" WITH is_template = true")
		}
	}
	dropOrphans(ctx, admin)
	var exists bool
	if err := admin.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1 AND datistemplate)", name).Scan(&exists); err != nil {
		return "", err
	}
	if exists {
		return name, nil
	}
	// A half-made template from an interrupted run is dropped and made again.
	if _, err := admin.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()); err != nil {
		return "", err
	}
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		return "", err
	}
	pool, err := pgxpool.New(ctx, WithDatabase(ServerURL(), name))
	if err != nil {
		return "", err
	}
	err = migrations.Migrate(ctx, pool, nil)
	pool.Close()
	if err != nil {
		return "", fmt.Errorf("migrate template: %w", err)
	}
	if _, err := admin.Exec(ctx, "ALTER DATABASE "+pgx.Identifier{name}.Sanitize()+" WITH is_template = true"); err != nil {
		return "", err
	}
	if _, err := admin.Exec(ctx, "COMMENT ON DATABASE "+pgx.Identifier{name}.Sanitize()+" IS '"+templateStamp+strconv.FormatInt(time.Now().Unix(), 10)+"'"); err != nil {
		return "", err
	}
	return name, nil
}

// templateStamp prefixes a template's comment, followed by the Unix time it
// was made or last used; templateKeep is how long an unused one of another
// schema is kept.
const (
	templateStamp = "inbox test template, used at "
	templateKeep  = 2 * time.Hour
)

// NewURL creates a fresh migrated database for t, drops it when t ends, and
// returns its URL (for processes started by the test).
func NewURL(t testing.TB) string {
	t.Helper()
	url, drop, err := NewDatabase()
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	t.Cleanup(func() {
		if err := drop(); err != nil {
			t.Logf("pgtest: %v", err)
		}
	})
	return url
}

// NewDatabase creates a fresh migrated database and returns its URL and a
// function that drops it: NewURL without a test, for an Example (whose
// output is checked, so it can be run) or a TestMain.
func NewDatabase() (url string, drop func() error, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	templateOnce.Do(func() { templateName, templateErr = ensureTemplate(ctx) })
	if templateErr != nil {
		return "", nil, templateErr
	}
	name := fmt.Sprintf("inbox_test_%d_%d_%d", os.Getpid(), time.Now().UnixNano()%1e6, dbCounter.Add(1))
	admin, err := pgx.Connect(ctx, ServerURL())
	if err != nil {
		return "", nil, fmt.Errorf("connect: %w", err)
	}
	defer admin.Close(ctx)
	// CREATE DATABASE ... TEMPLATE fails while another session is connected
	// to the template; only ensureTemplate connects to it, briefly, so retry.
	for i := 0; ; i++ {
		_, err = admin.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()+" TEMPLATE "+pgx.Identifier{templateName}.Sanitize())
		if err == nil || i == 50 || !strings.Contains(err.Error(), "being accessed by other users") {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		return "", nil, fmt.Errorf("create database: %w", err)
	}
	// A template made days ago has partitions up to a few days after it was
	// made: create today's (and the next days') as the worker would.
	db, err := pgx.Connect(ctx, WithDatabase(ServerURL(), name))
	if err != nil {
		return "", nil, fmt.Errorf("connect to %s: %w", name, err)
	}
	_, err = db.Exec(ctx, `SELECT envelope_partitions_ensure($1::bigint * interval '1 microsecond')`, migrations.PartitionsAhead.Microseconds())
	db.Close(ctx)
	if err != nil {
		return "", nil, fmt.Errorf("create envelope partitions in %s: %w", name, err)
	}
	drop = func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		admin, err := pgx.Connect(ctx, ServerURL())
		if err != nil {
			return fmt.Errorf("drop %s: %w", name, err)
		}
		defer admin.Close(ctx)
		if _, err := admin.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
			return fmt.Errorf("drop %s: %w", name, err)
		}
		return nil
	}
	return WithDatabase(ServerURL(), name), drop, nil
}

// EmptyURL creates a database with no schema at all (a wrong DATABASE_URL,
// or one never migrated) for t, drops it when t ends, and returns its URL.
func EmptyURL(t testing.TB) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	name := fmt.Sprintf("inbox_test_%d_%d_%d", os.Getpid(), time.Now().UnixNano()%1e6, dbCounter.Add(1))
	admin, err := pgx.Connect(ctx, ServerURL())
	if err != nil {
		t.Fatalf("pgtest: connect: %v", err)
	}
	defer admin.Close(ctx)
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		t.Fatalf("pgtest: create database: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if admin, err := pgx.Connect(ctx, ServerURL()); err == nil {
			defer admin.Close(ctx)
			_, _ = admin.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)")
		}
	})
	return WithDatabase(ServerURL(), name)
}

// OpenPool opens a pool on dbURL (NewURL's, or RoleURL's to run as a
// group role), closed when t ends.
func OpenPool(t testing.TB, dbURL string) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), dbURL)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// NewPool creates a fresh migrated database for t and returns a pool on it,
// closed when t ends.
func NewPool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(NewURL(t))
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	cfg.MaxConns = 20
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// redact hides u's password (any form pg.Redact knows).
func redact(u string) string { return pg.Redact(u) }

// dropOrphans drops test databases left by test binaries that died before
// their cleanup ran (killed by -timeout or by hand): their name carries the
// creating process id, and that process is gone.
func dropOrphans(ctx context.Context, admin *pgx.Conn) {
	rows, err := admin.Query(ctx, "SELECT datname FROM pg_database WHERE datname LIKE 'inbox\\_test\\_%'")
	if err != nil {
		return
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return
	}
	for _, name := range names {
		var pid int
		if _, err := fmt.Sscanf(name, "inbox_test_%d_", &pid); err != nil || pid <= 0 {
			continue
		}
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			continue // alive, or not ours to judge
		}
		_, _ = admin.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)")
	}
	// LOGIN roles made by RoleURL (their databases are gone by now).
	rows, err = admin.Query(ctx, "SELECT rolname FROM pg_roles WHERE rolname LIKE 'inbox\\_test\\_%\\_role'")
	if err != nil {
		return
	}
	roles, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return
	}
	for _, name := range roles {
		var pid int
		if _, err := fmt.Sscanf(name, "inbox_test_%d_", &pid); err != nil || pid <= 0 {
			continue
		}
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			continue
		}
		_, _ = admin.Exec(ctx, "DROP ROLE IF EXISTS "+pgx.Identifier{name}.Sanitize())
	}
}
