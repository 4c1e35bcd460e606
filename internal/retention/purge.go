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
	// BodyPartitions lists the body partitions (envelope_body) past
	// BodyCutoff, oldest first, and what became of each: dropped, held (it
	// still holds pending envelopes; the others are tried), busy, or, in a
	// dry run, would drop. Envelopes: the done and ignored envelopes whose
	// body went with it (for a held one, how many are pending).
	BodyPartitions []envelope.PartitionDrop `json:"body_partitions"`
	// BodiesDropped counts the envelopes whose body and payload were set to
	// NULL in their row: rows stored before envelope_body, and the copies
	// resolved envelopes keep (BodyPartitions count the rest).
	BodiesDropped int64 `json:"bodies_dropped"`
	// Partitions lists the partitions past DeleteCutoff, oldest first, and
	// what became of each: dropped, held (it still holds pending
	// envelopes), busy (its lock was not free: the next run tries again),
	// or, in a dry run, would drop.
	Partitions []envelope.PartitionDrop `json:"partitions"`
	// EnvelopesDeleted counts the envelopes of the dropped partitions (with
	// their attempts, duplicates, conflicts and replay records).
	EnvelopesDeleted int64 `json:"envelopes_deleted"`
	// KeysSwept counts dedup keys of dropped envelopes deleted.
	KeysSwept int64 `json:"keys_swept"`
	// Batches counts the transactions that dropped (or would drop) at least
	// one body.
	Batches int `json:"batches"`
}

// LockWait is how long dropping a partition waits for its tables' lock:
// the DETACH needs them to itself for a moment, and a longer wait would
// queue ingest behind it.
const LockWait = 500 * time.Millisecond

// Purge deletes what is past the tombstone window and drops old bodies.
// First it drops, oldest first, each envelope partition whose envelopes
// were all stored before now() - DeleteAfter, with their attempts,
// duplicates, conflicts and replay records: O(1) per partition, no dead
// tuples, no WAL per row (envelope.DropPartitions). A partition that still
// holds a pending envelope stops it there (work not done is never
// dropped), and is reported held. Then it sweeps the dedup keys of dropped
// envelopes, in batches. Then it drops the bodies (envelope_body) of each
// partition whose envelopes were all stored before now() - BodyAfter, a
// partition at a time (envelope.DropBodyPartitions), ledger postings or
// not: the posting keeps its link to the delivery, the row its hash. Last,
// for the bodies still held in rows (envelopes stored before envelope_body,
// migration 00200), in batches of cfg.BatchSize envelopes, each its own
// short transaction, it sets body and payload to NULL and body_purged_at to
// now() on done/ignored envelopes processed before now() - BodyAfter, in
// (processed_at, id) order, never one referenced by a ledger transaction,
// stopping after a batch smaller than the batch size; and likewise on
// resolved envelopes resolved before it.
//
// Failed envelopes keep their body (a copy in their row), and go with their
// partition.
// Rows locked by someone else (a replay, a duplicate being counted) are
// skipped by the body phase, and left for the next run.
//
// Safe to call concurrently and to call again: an interrupted purge (a
// cancelled ctx) keeps what it committed, returns the report so far with
// the error, and the next call carries on. A dry run reads the same
// partitions and batches and changes nothing; without concurrent writes it
// reports exactly what a real run would.
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

	// Partitions first: an envelope old enough to be deleted is not first
	// stripped of its body.
	rep.Partitions, err = envelope.DropPartitions(ctx, pool, rep.DeleteCutoff, LockWait, cfg.DryRun)
	for _, p := range rep.Partitions {
		if p.Outcome == envelope.PartitionDropped || p.Outcome == envelope.PartitionWouldDrop {
			rep.EnvelopesDeleted += p.Envelopes
		}
	}
	if err != nil {
		return rep, err
	}
	for !cfg.DryRun {
		if err := ctx.Err(); err != nil {
			return rep, err
		}
		n, err := envelope.SweepKeys(ctx, pool, cfg.BatchSize)
		if err != nil {
			return rep, err
		}
		rep.KeysSwept += n
		if n < int64(cfg.BatchSize) {
			break
		}
	}

	// Bodies a partition at a time (envelope_body, migration 00200), but
	// those of partitions that went (or, in a dry run, would go) whole.
	var gone time.Time
	for _, p := range rep.Partitions {
		if p.Outcome == envelope.PartitionDropped || p.Outcome == envelope.PartitionWouldDrop {
			gone = p.UpperAt
		}
	}
	rep.BodyPartitions, err = envelope.DropBodyPartitions(ctx, pool, rep.BodyCutoff, gone, LockWait, cfg.DryRun)
	if err != nil {
		return rep, err
	}

	// Bodies in rows: of envelopes stored before envelope_body, and the
	// copies resolved envelopes keep. Those of envelopes whose partition
	// went (or, in a dry run, would go) are not counted again.
	below, err := envelope.BodiesInRowsBelow(ctx, pool)
	if err != nil {
		return rep, err
	}
	batch := envelope.PurgeBatch{Cutoff: rep.BodyCutoff, Limit: cfg.BatchSize, DryRun: cfg.DryRun, RowsBelow: below, StoredFrom: gone}
	// Done and ignored envelopes, then resolved ones (failed envelopes an
	// operator closed: final too, and few).
	for _, resolved := range []bool{false, true} {
		batch.Resolved, batch.After = resolved, envelope.PurgeCursor{}
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
	}
	return rep, nil
}
