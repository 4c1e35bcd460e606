package backfill

import (
	"context"
	"fmt"
	"time"

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
}

func startRun(ctx context.Context, pool *pgxpool.Pool, r *runRow) error {
	err := pool.QueryRow(ctx, `
		INSERT INTO backfill_run (source, provider, actor, dry_run, since, until)
		VALUES ($1, $2, $3, $4, $5, $6) RETURNING id`,
		r.Source, r.Provider, r.Actor, r.DryRun, r.Since, r.Until).Scan(&r.ID)
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
		SELECT source, provider, actor, dry_run, since, until, listed, found, stored, cursor, status
		  FROM backfill_run WHERE id = $1`, id).
		Scan(&r.Source, &r.Provider, &r.Actor, &r.DryRun, &r.Since, &r.Until, &r.Listed, &r.Found, &r.Stored, &cursor, &r.Status)
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
	_, err := pool.Exec(ctx, `
		UPDATE backfill_run SET listed = $2, found = $3, stored = $4, cursor = NULLIF($5, ''), status = 'running', error = NULL, finished_at = NULL
		 WHERE id = $1`, r.ID, r.Listed, r.Found, r.Stored, r.Cursor)
	if err != nil {
		return fmt.Errorf("record backfill progress: %w", err)
	}
	return nil
}

// finishRun records how the run ended. It runs on a context of its own, so
// an interrupted run is still recorded as such.
func finishRun(ctx context.Context, pool *pgxpool.Pool, r *runRow, status, errMsg string) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	_, err := pool.Exec(ctx, `
		UPDATE backfill_run SET listed = $2, found = $3, stored = $4, cursor = NULLIF($5, ''), status = $6, error = NULLIF($7, ''), finished_at = now()
		 WHERE id = $1`, r.ID, r.Listed, r.Found, r.Stored, r.Cursor, status, errMsg)
	if err != nil {
		return fmt.Errorf("record backfill result: %w", err)
	}
	r.Status = status
	return nil
}
