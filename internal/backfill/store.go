package backfill

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Run statuses (backfill_run.status).
const (
	StatusRunning     = "running"
	StatusDone        = "done"
	StatusFailed      = "failed"
	StatusInterrupted = "interrupted"
)

// runRow is the backfill_run row of a run.
type runRow struct {
	ID                    int64
	Source, Provider      string
	Actor                 string
	DryRun                bool
	Since, Until          time.Time
	Listed, Found, Stored int
	Cursor                string
	Status                string
	// Accounts are the Stripe accounts the run lists, in order ("": the
	// key's own); nil for GitHub runs and rows older than 00174.
	Accounts []string
	// Writer is this process's token: every write is conditional on it.
	Writer string
}

// ErrClaimed is returned when a run's row is written by another process:
// it was resumed (claimed) from under this one.
var ErrClaimed = errors.New("another process claimed this backfill run")

func newWriter() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// claimRun takes run r.ID over for a resume by actor: only when it is not
// running, or its writer's heartbeat is older than stale (the writer died).
func claimRun(ctx context.Context, pool *pgxpool.Pool, r *runRow, actor string, stale time.Duration) error {
	r.Writer = newWriter()
	var heartbeat *time.Time
	err := pool.QueryRow(ctx, `
		UPDATE backfill_run SET status = 'running', error = NULL, finished_at = NULL, writer = $2,
		       heartbeat_at = now(), resumed_by = $3, resumed_at = now()
		 WHERE id = $1 AND (status <> 'running' OR heartbeat_at IS NULL OR heartbeat_at < now() - $4::interval)
		RETURNING id`, r.ID, r.Writer, actor, stale.String()).Scan(new(int64))
	if errors.Is(err, pgx.ErrNoRows) {
		_ = pool.QueryRow(ctx, `SELECT heartbeat_at FROM backfill_run WHERE id = $1`, r.ID).Scan(&heartbeat)
		at := "-"
		if heartbeat != nil {
			at = heartbeat.UTC().Format(time.RFC3339)
		}
		return fmt.Errorf("backfill run %d is running (last heartbeat %s): another process writes it; resume it once it stopped, or once its heartbeat is %s old", r.ID, at, stale)
	}
	if err != nil {
		return fmt.Errorf("claim backfill run %d: %w", r.ID, err)
	}
	r.Status = StatusRunning
	return nil
}

// heartbeat records that the run's writer is alive.
func heartbeat(ctx context.Context, pool *pgxpool.Pool, r *runRow) error {
	tag, err := pool.Exec(ctx, `UPDATE backfill_run SET heartbeat_at = now() WHERE id = $1 AND writer = $2`, r.ID, r.Writer)
	if err != nil {
		return fmt.Errorf("record backfill heartbeat: %w", err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("backfill run %d: %w", r.ID, ErrClaimed)
	}
	return nil
}

func startRun(ctx context.Context, pool *pgxpool.Pool, r *runRow) error {
	r.Writer = newWriter()
	err := pool.QueryRow(ctx, `
		INSERT INTO backfill_run (source, provider, actor, dry_run, since, until, accounts, writer, heartbeat_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, now()) RETURNING id`,
		r.Source, r.Provider, r.Actor, r.DryRun, r.Since, r.Until, r.Accounts, r.Writer).Scan(&r.ID)
	if err != nil {
		return fmt.Errorf("record backfill run: %w", err)
	}
	return nil
}

// loadRun reads run id for --resume.
func loadRun(ctx context.Context, pool *pgxpool.Pool, id int64) (runRow, error) {
	r := runRow{ID: id}
	var cursor *string
	err := pool.QueryRow(ctx, `
		SELECT source, provider, actor, dry_run, since, until, listed, found, stored, cursor, status, accounts
		  FROM backfill_run WHERE id = $1`, id).
		Scan(&r.Source, &r.Provider, &r.Actor, &r.DryRun, &r.Since, &r.Until, &r.Listed, &r.Found, &r.Stored, &cursor, &r.Status, &r.Accounts)
	if err != nil {
		return runRow{}, fmt.Errorf("load backfill run %d: %w", id, err)
	}
	if cursor != nil {
		r.Cursor = *cursor
	}
	return r, nil
}

// unfinishedRun returns the id of the latest run of source by actor started
// at or after since that did not end done, or 0.
func unfinishedRun(ctx context.Context, pool *pgxpool.Pool, source, actor string, since time.Time) (int64, error) {
	var id int64
	err := pool.QueryRow(ctx, `
		SELECT coalesce(max(id), 0) FROM backfill_run
		 WHERE source = $1 AND actor = $2 AND started_at >= $3 AND status <> 'done'`, source, actor, since).Scan(&id)
	if err != nil {
		return 0, fmt.Errorf("look up unfinished backfill run: %w", err)
	}
	return id, nil
}

// saveProgress records the counts and the cursor of the last page done.
func saveProgress(ctx context.Context, pool *pgxpool.Pool, r *runRow) error {
	tag, err := pool.Exec(ctx, `
		UPDATE backfill_run SET listed = $2, found = $3, stored = $4, cursor = NULLIF($5, ''), status = 'running', error = NULL, finished_at = NULL,
		       heartbeat_at = now()
		 WHERE id = $1 AND writer = $6`, r.ID, r.Listed, r.Found, r.Stored, r.Cursor, r.Writer)
	if err != nil {
		return fmt.Errorf("record backfill progress: %w", err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("backfill run %d: %w", r.ID, ErrClaimed)
	}
	return nil
}

// finishRun records how the run ended. It runs on a context of its own, so
// an interrupted run is still recorded as such.
func finishRun(ctx context.Context, pool *pgxpool.Pool, r *runRow, status, errMsg string) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	tag, err := pool.Exec(ctx, `
		UPDATE backfill_run SET listed = $2, found = $3, stored = $4, cursor = NULLIF($5, ''), status = $6, error = NULLIF($7, ''), finished_at = now()
		 WHERE id = $1 AND writer = $8`, r.ID, r.Listed, r.Found, r.Stored, r.Cursor, status, errMsg, r.Writer)
	if err != nil {
		return fmt.Errorf("record backfill result: %w", err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("backfill run %d: %w", r.ID, ErrClaimed)
	}
	r.Status = status
	return nil
}
