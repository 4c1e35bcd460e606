package envelope

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/jackc/pgx/v5"
)

// PurgeCursor is a position in (processed_at, id) order: where a purge
// batch starts (exclusive) and ends.
type PurgeCursor struct {
	ProcessedAt time.Time
	ID          int64
}

// PurgeBatch is one batch of a body purge: up to Limit done or ignored
// envelopes processed before Cutoff, after After, that no ledger
// transaction references. DryRun reads the same batch and changes nothing.
type PurgeBatch struct {
	Cutoff time.Time
	After  PurgeCursor
	Limit  int
	DryRun bool
	// StoredFrom, when not zero, keeps only envelopes stored at or after it
	// (those before are in partitions that go whole).
	StoredFrom time.Time
	// RowsBelow, when not 0, keeps only envelopes with an id below it: the
	// partitions whose rows hold their body (BodiesInRowsBelow). Done and
	// ignored envelopes stored since keep theirs in envelope_body, which
	// goes a partition at a time (DropBodyPartitions).
	RowsBelow int64
	// Resolved takes resolved envelopes instead of done and ignored ones
	// (few, served by the status index rather than the partial one the
	// done and ignored pass walks), those whose last resolution is older
	// than Cutoff too.
	Resolved bool
}

// purgeCandidates selects the next batch of final envelopes processed
// before $1, after the cursor ($2, $3), that no ledger transaction
// references. The predicates repeat the partial indexes' of migration 00104
// so the planner uses them.
const purgeCandidates = `
	SELECT e.id, e.processed_at
	  FROM envelope e
	 WHERE %s%s
	   AND e.processed_at < $1
	   AND (e.processed_at, e.id) > ($2, $3)
	   AND NOT EXISTS (SELECT 1 FROM ledger_transaction t WHERE t.envelope_id = e.id)
	   AND e.id >= $5 AND e.id < $6
	   AND (e.body IS NOT NULL OR e.payload IS NOT NULL)
	 ORDER BY e.processed_at, e.id
	 LIMIT $4`

// purgeLock makes a real run lock its batch, skipping rows another
// transaction holds; FOR UPDATE also rechecks the predicates on the row's
// latest version (a replayed envelope is pending, or processed anew).
const purgeLock = `
	   FOR UPDATE OF e SKIP LOCKED`

// DropBodies sets body and payload to NULL and body_purged_at to now() on
// one batch of envelopes (b) whose body is still there, in one statement
// (its own transaction when db is a pool), and returns how many it changed
// and the last one's position. Rows another transaction holds are skipped.
// A dry run returns what it would change and changes nothing.
func DropBodies(ctx context.Context, db DB, b PurgeBatch) (int, PurgeCursor, error) {
	statuses := "e.status IN ('done', 'ignored')"
	if b.Resolved {
		// Resolved longer ago than the body window too: an envelope
		// resolved today (or un-resolved and resolved again) keeps its body
		// that long, so an un-resolve can still be followed by a replay.
		statuses = `e.status = 'resolved'
	   AND NOT EXISTS (SELECT 1 FROM envelope_resolution r WHERE r.envelope_id = e.id AND r.at >= $1)`
	}
	q := fmt.Sprintf(purgeCandidates, statuses, "\n\t   AND e.body_purged_at IS NULL")
	if !b.DryRun {
		q = `
	WITH c AS (` + q + purgeLock + `
	)
	UPDATE envelope e
	   SET body = NULL, payload = NULL, body_purged_at = now()
	  FROM c
	 WHERE e.id = c.id
	RETURNING e.id, c.processed_at`
	}
	below := int64(math.MaxInt64)
	if b.RowsBelow != 0 && !b.Resolved {
		below = b.RowsBelow
	}
	rows, err := db.Query(ctx, q, b.Cutoff, b.After.ProcessedAt, b.After.ID, b.Limit, IDAt(b.StoredFrom), below)
	if err != nil {
		return 0, PurgeCursor{}, fmt.Errorf("drop bodies: %w", err)
	}
	var n int
	var c, last PurgeCursor
	_, err = pgx.ForEachRow(rows, []any{&c.ID, &c.ProcessedAt}, func() error {
		n++
		// RETURNING has no order: keep the largest position.
		if c.ProcessedAt.After(last.ProcessedAt) || (c.ProcessedAt.Equal(last.ProcessedAt) && c.ID > last.ID) {
			last = c
		}
		return nil
	})
	if err != nil {
		return 0, PurgeCursor{}, fmt.Errorf("drop bodies: %w", err)
	}
	return n, last, nil
}

// BodiesInRowsBelow returns the id below which envelopes may hold their
// body in their own row (stored before envelope_body, migration 00200): the
// upper bound of the newest live partition marked bodies_in_rows, or 1 (no
// id) when none is left. Failed and resolved envelopes keep a copy in their
// row wherever they are.
func BodiesInRowsBelow(ctx context.Context, db DB) (int64, error) {
	var below int64
	err := db.QueryRow(ctx, `SELECT coalesce(max(upper_id), 1) FROM envelope_partition WHERE dropped_at IS NULL AND bodies_in_rows`).Scan(&below)
	if err != nil {
		return 0, fmt.Errorf("read the partitions holding bodies in rows: %w", err)
	}
	return below, nil
}
