package retention

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inboxhq/inbox/internal/durations"
	"github.com/inboxhq/inbox/internal/envelope"
)

// Defaults of a zero Config.
const (
	DefaultBodyAfter   = 30 * 24 * time.Hour
	DefaultDeleteAfter = 90 * 24 * time.Hour
	DefaultBatchSize   = 1000
)

// ErrInvalidConfig is wrapped by every configuration error.
var ErrInvalidConfig = errors.New("invalid retention config")

// Config says what Purge drops. Zero fields take the defaults.
type Config struct {
	// BodyAfter: the body and parsed payload of a done or ignored envelope
	// are dropped once it was processed longer ago than this (default 30
	// days). The row stays as a tombstone.
	BodyAfter time.Duration
	// DeleteAfter: the tombstone itself, with its attempts, replays and
	// conflicts, is deleted once processed longer ago than this (default 90
	// days). Must be at least BodyAfter. After it, a redelivered id is
	// accepted as new: keep it longer than any provider redelivers.
	DeleteAfter time.Duration
	// BatchSize is how many envelopes one transaction changes (default 1000).
	BatchSize int
	// DryRun counts what would change and changes nothing.
	DryRun bool
}

// WithDefaults returns c with zero fields set to the defaults, or an error
// wrapping ErrInvalidConfig.
func (c Config) WithDefaults() (Config, error) {
	bad := func(format string, args ...any) (Config, error) {
		return c, fmt.Errorf("%w: %s", ErrInvalidConfig, fmt.Sprintf(format, args...))
	}
	switch {
	case c.BodyAfter < 0:
		return bad("body-after %s must be positive", durations.Format(c.BodyAfter))
	case c.DeleteAfter < 0:
		return bad("delete-after %s must be positive", durations.Format(c.DeleteAfter))
	case c.BatchSize < 0:
		return bad("batch size %d must be positive", c.BatchSize)
	}
	if c.BodyAfter == 0 {
		c.BodyAfter = DefaultBodyAfter
	}
	if c.DeleteAfter == 0 {
		c.DeleteAfter = DefaultDeleteAfter
	}
	if c.BatchSize == 0 {
		c.BatchSize = DefaultBatchSize
	}
	if c.DeleteAfter < c.BodyAfter {
		return bad("delete-after %s is shorter than body-after %s: tombstones must outlive bodies", durations.Format(c.DeleteAfter), durations.Format(c.BodyAfter))
	}
	return c, nil
}

// Report says what Purge did, or, for a dry run, would do.
type Report struct {
	DryRun bool `json:"dry_run"`
	// Now is the database's now() when the purge started; the cutoffs are
	// computed from it once, so every batch applies the same ones.
	Now time.Time `json:"now"`
	// BodyCutoff: done/ignored envelopes processed before it lose their body.
	BodyCutoff time.Time `json:"body_cutoff"`
	// DeleteCutoff: done/ignored envelopes processed before it are deleted.
	DeleteCutoff time.Time `json:"delete_cutoff"`
	// BodiesDropped counts envelopes whose body and payload were set to NULL.
	BodiesDropped int64 `json:"bodies_dropped"`
	// EnvelopesDeleted counts deleted envelope rows; the three after it,
	// their dependent rows deleted with them.
	EnvelopesDeleted int64 `json:"envelopes_deleted"`
	AttemptsDeleted  int64 `json:"attempts_deleted"`
	ReplaysDeleted   int64 `json:"replays_deleted"`
	ConflictsDeleted int64 `json:"conflicts_deleted"`
	// DuplicatesDeleted counts envelope_duplicate rows (provider retries).
	DuplicatesDeleted int64 `json:"duplicates_deleted"`
	// Batches counts the transactions that changed (or would change) at
	// least one envelope.
	Batches int `json:"batches"`
}

// Purge drops old bodies and deletes old tombstones, in batches of
// cfg.BatchSize envelopes, each batch in its own short transaction: it first
// deletes done/ignored envelopes processed before now() - DeleteAfter (with
// their envelope_attempt, envelope_replay, envelope_conflict and
// envelope_duplicate rows), then
// sets body and payload to NULL and body_purged_at to now() on the remaining
// done/ignored envelopes processed before now() - BodyAfter. Each phase
// walks the envelopes in (processed_at, id) order and stops after a batch
// smaller than the batch size.
//
// It never touches a pending or failed envelope, nor one referenced by a
// ledger transaction. Rows locked by someone else (a replay, a duplicate
// being counted) are skipped, and left for the next run.
//
// Safe to call concurrently and to call again: an interrupted purge (a
// cancelled ctx) keeps the batches it committed, returns the report so far
// with the error, and the next call carries on. A dry run reads the same
// batches and changes nothing; without concurrent writes it reports exactly
// what a real run would.
func Purge(ctx context.Context, pool *pgxpool.Pool, cfg Config) (Report, error) {
	cfg, err := cfg.WithDefaults()
	if err != nil {
		return Report{}, err
	}
	rep := Report{DryRun: cfg.DryRun}
	err = pool.QueryRow(ctx, `
		SELECT now(), now() - $1::bigint * interval '1 microsecond', now() - $2::bigint * interval '1 microsecond'`,
		cfg.BodyAfter.Microseconds(), cfg.DeleteAfter.Microseconds(),
	).Scan(&rep.Now, &rep.BodyCutoff, &rep.DeleteCutoff)
	if err != nil {
		return rep, fmt.Errorf("read clock: %w", err)
	}

	// Tombstones first: an envelope old enough to be deleted is not first
	// stripped of its body. The body phase starts where this one ends.
	batch := envelope.PurgeBatch{Cutoff: rep.DeleteCutoff, Limit: cfg.BatchSize, DryRun: cfg.DryRun}
	for {
		if err := ctx.Err(); err != nil {
			return rep, err
		}
		n, last, d, err := envelope.DeleteTombstones(ctx, pool, batch)
		if err != nil {
			return rep, err
		}
		rep.EnvelopesDeleted += d.Envelopes
		rep.AttemptsDeleted += d.Attempts
		rep.ReplaysDeleted += d.Replays
		rep.ConflictsDeleted += d.Conflicts
		rep.DuplicatesDeleted += d.Duplicates
		if n > 0 {
			rep.Batches++
			batch.After = last
		}
		if n < cfg.BatchSize {
			break
		}
	}

	batch = envelope.PurgeBatch{Cutoff: rep.BodyCutoff, After: envelope.PurgeCursor{ProcessedAt: rep.DeleteCutoff}, Limit: cfg.BatchSize, DryRun: cfg.DryRun}
	for {
		if err := ctx.Err(); err != nil {
			return rep, err
		}
		n, last, err := envelope.DropBodies(ctx, pool, batch)
		if err != nil {
			return rep, err
		}
		if n > 0 {
			rep.Batches++
			rep.BodiesDropped += int64(n)
			batch.After = last
		}
		if n < cfg.BatchSize {
			break
		}
	}
	return rep, nil
}
