package envelope

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Partition widths (--partition-width): one partition of envelopes (and of
// their attempts, duplicates and conflicts) per UTC day or hour.
const (
	PartitionDay  = 24 * time.Hour
	PartitionHour = time.Hour
)

// DefaultPartitionsAhead is how far past now the partitions are kept
// created (EnsurePartitions): a worker down for less than that never leaves
// ingest without a partition to store into.
const DefaultPartitionsAhead = 3 * 24 * time.Hour

// idEpoch is the Unix time of envelope ids' second 0 (envelope_id_at).
const idEpoch = 1577836800

// IDAt is envelope_id_at(t): the smallest id of an envelope stored at t or
// later. Envelopes stored before the partitioned layout have smaller ids
// than any. The zero time gives the smallest id.
func IDAt(t time.Time) int64 {
	if t.IsZero() {
		return math.MinInt64
	}
	return (int64(math.Floor(float64(t.UnixMicro())/1e6)) - idEpoch) << 20
}

// Partition is a row of envelope_partition: the partition envelope_<Name>
// holds the envelopes stored in [LowerAt, UpperAt).
type Partition struct {
	Name string
	// LowerAt is zero for the legacy partition (every envelope stored
	// before the partitioned layout).
	LowerAt, UpperAt time.Time
}

// EnsurePartitions creates the partitions missing between the newest one
// (or now) and now + ahead, each width wide (PartitionDay or
// PartitionHour; 0: as wide as the newest one), and returns how many it
// created. Safe to call from any number of processes at once.
func EnsurePartitions(ctx context.Context, db DB, ahead, width time.Duration) (int, error) {
	var w *int64
	switch width {
	case 0:
	case PartitionDay, PartitionHour:
		us := width.Microseconds()
		w = &us
	default:
		return 0, fmt.Errorf("partition width %s: must be 1h or 24h", width)
	}
	var n int
	err := db.QueryRow(ctx, `SELECT envelope_partitions_ensure($1::bigint * interval '1 microsecond', $2::bigint * interval '1 microsecond')`,
		ahead.Microseconds(), w).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("create envelope partitions: %w", err)
	}
	return n, nil
}

// Partitions returns the live partitions, oldest first.
func Partitions(ctx context.Context, db DB) ([]Partition, error) {
	rows, err := db.Query(ctx, `
		SELECT name, lower_at, upper_at
		  FROM envelope_partition
		 WHERE dropped_at IS NULL
		 ORDER BY upper_id`)
	if err != nil {
		return nil, fmt.Errorf("list envelope partitions: %w", err)
	}
	var out []Partition
	var p Partition
	var lower *time.Time
	_, err = pgx.ForEachRow(rows, []any{&p.Name, &lower, &p.UpperAt}, func() error {
		p.LowerAt = time.Time{}
		if lower != nil {
			p.LowerAt = *lower
		}
		out = append(out, p)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list envelope partitions: %w", err)
	}
	return out, nil
}

// PartitionDrop says what DropPartitions did with one partition.
type PartitionDrop struct {
	Name    string    `json:"name"`
	UpperAt time.Time `json:"upper_at"`
	// Outcome: "dropped", "held" (it still holds pending envelopes:
	// nothing was dropped), "would drop" (a dry run), or "busy" (the lock
	// was not free within the wait; the next run tries again).
	Outcome string `json:"outcome"`
	// Envelopes: how many it held when dropped (or would drop); for a held
	// one, how many are pending.
	Envelopes int64 `json:"envelopes"`
}

// Partition drop outcomes.
const (
	PartitionDropped   = "dropped"
	PartitionHeld      = "held"
	PartitionWouldDrop = "would drop"
	PartitionBusy      = "busy"
)

// DropPartitions drops, oldest first, each live partition whose envelopes
// were all stored before cutoff, with its attempts, duplicates, conflicts,
// counts and replay records, each drop in a transaction of its own. It
// stops at the first partition still holding a pending envelope (work not
// done is never dropped, and partitions go in order) or whose lock is busy
// past lockWait, and says so in the result. A dry run drops nothing and
// says what would go. Keys of dropped envelopes are left to SweepKeys; a
// redelivery of their ids meanwhile is stored as new, as after a delete.
func DropPartitions(ctx context.Context, pool *pgxpool.Pool, cutoff time.Time, lockWait time.Duration, dryRun bool) ([]PartitionDrop, error) {
	parts, err := Partitions(ctx, pool)
	if err != nil {
		return nil, err
	}
	var out []PartitionDrop
	for _, p := range parts {
		if p.UpperAt.After(cutoff) {
			break
		}
		if err := ctx.Err(); err != nil {
			return out, err
		}
		d := PartitionDrop{Name: p.Name, UpperAt: p.UpperAt}
		if dryRun {
			var pending int64
			err = pool.QueryRow(ctx, `
				SELECT coalesce(sum(n) FILTER (WHERE kind IN ('pending', 'done', 'failed', 'ignored', 'resolved')), 0),
				       coalesce(sum(n) FILTER (WHERE kind = 'pending'), 0)
				  FROM envelope_count c, envelope_partition p
				 WHERE p.name = $1
				   AND p.dropped_at IS NULL AND c.bucket <@ envelope_count_range(p.lower_id, p.upper_id)`, p.Name).Scan(&d.Envelopes, &pending)
			if err != nil {
				return out, fmt.Errorf("count envelope partition %s: %w", p.Name, err)
			}
			d.Outcome = PartitionWouldDrop
			if pending > 0 {
				d.Outcome, d.Envelopes = PartitionHeld, pending
			}
			out = append(out, d)
			if pending > 0 {
				break
			}
			continue
		}
		err := pool.QueryRow(ctx, `SELECT outcome, envelopes FROM envelope_partition_drop($1, $2, $3::bigint * interval '1 microsecond')`,
			p.Name, cutoff, lockWait.Microseconds()).Scan(&d.Outcome, &d.Envelopes)
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "55P03" { // lock_not_available
			d.Outcome = PartitionBusy
			return append(out, d), nil
		}
		if err != nil {
			return out, fmt.Errorf("drop envelope partition %s: %w", p.Name, err)
		}
		out = append(out, d)
		if d.Outcome != PartitionDropped {
			break
		}
	}
	return out, nil
}

// DropBodyPartitions drops, oldest first, the body partition
// (envelope_body_<name>) of each live partition whose envelopes were all
// stored before cutoff (now() - the body window), each drop in a
// transaction of its own: O(1), no dead tuples, no WAL per row. First, in
// a transaction of its own, the failed and resolved envelopes that have no
// copy of their body in their row get one (replays stay possible);
// everything else of the partition loses its body, ledger postings or not. A partition still holding a
// pending envelope is held and the next ones are tried; a lock busy past
// lockWait stops the run (the next one retries). A dry run drops nothing
// and says what would go. Envelopes: how many done and ignored envelopes
// lost (would lose) their body; for a held one, how many are pending. A
// body partition that took no body away (empty, or only failed envelopes'
// copies made) is dropped without being listed.
//
// Partitions ending at or before after are left out: the caller dropped
// them whole (or, in a dry run, would have).
func DropBodyPartitions(ctx context.Context, pool *pgxpool.Pool, cutoff, after time.Time, lockWait time.Duration, dryRun bool) ([]PartitionDrop, error) {
	// A partition that also holds bodies in its rows (stored before 00200)
	// counts its body table's rows instead: it is the one such, or none.
	rows, err := pool.Query(ctx, `
		SELECT p.name, p.upper_at, p.bodies_in_rows,
		       CASE WHEN p.bodies_in_rows THEN (SELECT count(*) FROM envelope_body b WHERE b.id >= p.lower_id AND b.id < p.upper_id)
		            ELSE coalesce(sum(c.n) FILTER (WHERE c.kind IN ('done', 'ignored')), 0) END,
		       coalesce(sum(c.n) FILTER (WHERE c.kind = 'pending'), 0)
		  FROM envelope_partition p
		  LEFT JOIN envelope_count c ON c.bucket <@ envelope_count_range(p.lower_id, p.upper_id)
		 WHERE p.dropped_at IS NULL AND p.body_dropped_at IS NULL AND p.upper_at <= $1 AND p.upper_at > $2
		   AND to_regclass('envelope_body_' || p.name) IS NOT NULL
		 GROUP BY p.name, p.upper_at, p.upper_id, p.lower_id, p.bodies_in_rows
		 ORDER BY p.upper_id`, cutoff, after)
	if err != nil {
		return nil, fmt.Errorf("list body partitions: %w", err)
	}
	type candidate struct {
		d            PartitionDrop
		bodiesInRows bool
		pending      int64
	}
	var cands []candidate
	var c candidate
	if _, err := pgx.ForEachRow(rows, []any{&c.d.Name, &c.d.UpperAt, &c.bodiesInRows, &c.d.Envelopes, &c.pending}, func() error {
		cands = append(cands, c)
		return nil
	}); err != nil {
		return nil, fmt.Errorf("list body partitions: %w", err)
	}
	var out []PartitionDrop
	for _, c := range cands {
		if err := ctx.Err(); err != nil {
			return out, err
		}
		d := c.d
		if dryRun {
			d.Outcome = PartitionWouldDrop
			// An empty body table of a day stored in rows holds no work (as
			// envelope_body_drop decides).
			if c.pending > 0 && (d.Envelopes > 0 || !c.bodiesInRows) {
				d.Outcome, d.Envelopes = PartitionHeld, c.pending
			}
			if d.Envelopes > 0 {
				out = append(out, d)
			}
			continue
		}
		// The copies first, in a transaction of their own: the drop's lock
		// then covers no copy.
		if _, err := pool.Exec(ctx, `SELECT envelope_body_keep($1)`, d.Name); err != nil {
			return out, fmt.Errorf("keep the failed envelopes' bodies of envelope partition %s: %w", d.Name, err)
		}
		err := pool.QueryRow(ctx, `SELECT outcome, bodies FROM envelope_body_drop($1, $2, $3::bigint * interval '1 microsecond')`,
			d.Name, cutoff, lockWait.Microseconds()).Scan(&d.Outcome, &d.Envelopes)
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "55P03" { // lock_not_available
			d.Outcome = PartitionBusy
			return append(out, d), nil
		}
		if err != nil {
			return out, fmt.Errorf("drop the bodies of envelope partition %s: %w", d.Name, err)
		}
		if d.Envelopes > 0 { // an empty body table goes without a word
			out = append(out, d)
		}
	}
	return out, nil
}

// SweepKeys deletes up to limit dedup keys (envelope_key) whose envelope's
// partition was dropped, and returns how many. A key past its envelope no
// longer blocks its delivery id (ingest takes it over); this reclaims the
// space. The retention purge runs it after dropping partitions.
func SweepKeys(ctx context.Context, db DB, limit int) (int64, error) {
	var n int64
	if err := db.QueryRow(ctx, `SELECT envelope_key_sweep($1)`, limit).Scan(&n); err != nil {
		return 0, fmt.Errorf("sweep envelope keys: %w", err)
	}
	return n, nil
}

// PartitionHorizon returns when the newest partition ends: ingest cannot
// store an envelope past it (the worker keeps it ahead; an alert fires when
// it is near).
func PartitionHorizon(ctx context.Context, db DB) (time.Time, error) {
	var t *time.Time
	if err := db.QueryRow(ctx, `SELECT max(upper_at) FROM envelope_partition WHERE dropped_at IS NULL`).Scan(&t); err != nil {
		return time.Time{}, fmt.Errorf("read the envelope partition horizon: %w", err)
	}
	if t == nil {
		return time.Time{}, nil
	}
	return *t, nil
}
