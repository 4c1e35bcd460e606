// Package migrations owns the whole database schema as embedded goose
// migrations: River's tables (versions 1..99, generated from the River module
// by rivergen) and the inbox's own tables (versions 100 and up).
//
// Migrate is safe to run twice and from several processes at once: goose
// takes a PostgreSQL advisory lock for the duration of a run.
package migrations

//go:generate go run ./internal/rivergen .

import (
	"context"
	"database/sql"
	"embed"
	"fmt"
	"io"
	"io/fs"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"
)

// riverVersionLimit is the first goose version that belongs to the inbox's
// own schema; River's versions sit below it.
const riverVersionLimit = 100

//go:embed *.sql
var files embed.FS

// FS returns the embedded migration files.
func FS() fs.FS { return files }

func provider(db *sql.DB) (*goose.Provider, error) {
	locker, err := lock.NewPostgresSessionLocker()
	if err != nil {
		return nil, fmt.Errorf("goose locker: %w", err)
	}
	p, err := goose.NewProvider(goose.DialectPostgres, db, files, goose.WithSessionLocker(locker))
	if err != nil {
		return nil, fmt.Errorf("goose provider: %w", err)
	}
	return p, nil
}

// PartitionsAhead is how far ahead of now Migrate creates the envelope
// partitions (envelope.DefaultPartitionsAhead: migrations imports nothing
// of this module).
const PartitionsAhead = 3 * 24 * time.Hour

// Migrate applies every pending migration and reports each applied version
// to out (nil for silence). Running it on a current database applies nothing.
func Migrate(ctx context.Context, pool *pgxpool.Pool, out io.Writer) error {
	db := stdlib.OpenDBFromPool(pool)
	defer db.Close()
	p, err := provider(db)
	if err != nil {
		return err
	}
	results, err := p.Up(ctx)
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	// The envelope partitions are kept ahead by the worker and ingest; a
	// database just migrated gets them too, so it can store at once.
	if _, err := pool.Exec(ctx, `SELECT envelope_partitions_ensure($1::bigint * interval '1 microsecond')`, PartitionsAhead.Microseconds()); err != nil {
		return fmt.Errorf("migrate: create envelope partitions: %w", err)
	}
	if out != nil {
		if len(results) == 0 {
			fmt.Fprintln(out, "migrate: schema is current, nothing to apply")
		}
		for _, r := range results {
			fmt.Fprintf(out, "migrate: applied %s in %s\n", r.Source.Path, r.Duration.Round(1e6))
		}
	}
	return nil
}

// MigrateTo applies the pending migrations up to and including version,
// and nothing after it: for upgrade tests, which seed a database as an
// earlier release left it. It creates no envelope partitions.
func MigrateTo(ctx context.Context, pool *pgxpool.Pool, version int64) error {
	db := stdlib.OpenDBFromPool(pool)
	defer db.Close()
	p, err := provider(db)
	if err != nil {
		return err
	}
	if _, err := p.UpTo(ctx, version); err != nil {
		return fmt.Errorf("migrate to %d: %w", version, err)
	}
	return nil
}

// Status is one migration's state.
type Status struct {
	Version   int64  `json:"version"`
	File      string `json:"file"`
	Applied   bool   `json:"applied"`
	AppliedAt string `json:"applied_at,omitempty"`
}

// List returns every known migration and whether it is applied.
func List(ctx context.Context, pool *pgxpool.Pool) ([]Status, error) {
	db := stdlib.OpenDBFromPool(pool)
	defer db.Close()
	p, err := provider(db)
	if err != nil {
		return nil, err
	}
	st, err := p.Status(ctx)
	if err != nil {
		return nil, fmt.Errorf("migration status: %w", err)
	}
	out := make([]Status, 0, len(st))
	for _, s := range st {
		r := Status{Version: s.Source.Version, File: s.Source.Path, Applied: s.State == goose.StateApplied}
		if r.Applied {
			r.AppliedAt = s.AppliedAt.UTC().Format("2006-01-02 15:04:05Z")
		}
		out = append(out, r)
	}
	return out, nil
}
