package envelope_test

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/inboxhq/inbox/internal/envelope"
	"github.com/inboxhq/inbox/internal/envelope/envelopetest"
	"github.com/inboxhq/inbox/internal/pg"
	"github.com/inboxhq/inbox/internal/pgtest"
)

// The worker's statements on a batch of envelopes (LockMany, Existing,
// FinishMany) read the batch's rows, not the backlog, on a connection that
// made its first calls while the tables were empty, after a peak left a
// backlog in a partition that has no statistics (nothing analyzed it), and
// for as long as the connection lives. A plan cached from the first calls (a
// sequential scan of every partition, or a walk of the status index over
// every pending envelope) reads the whole backlog at each batch; so does the
// generic plan PostgreSQL switches to once the batches' own plans grow more
// expensive than it.
func TestBatchStatementsReadTheBatchNotTheBacklog(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	pgtest.AwayFromMidnight(t, b.pool, time.Minute) // the backlog and its batches in one day's partition
	c, err := b.pool.Acquire(ctx)
	require.NoError(t, err)
	defer c.Release()
	conn := c.Conn()

	// batch runs the three statements in one transaction, the first
	// envelope failed and the others done, and returns how many rows and
	// index entries of the partitions parts they read.
	batch := func(ids []int64, want int, parts ...string) int64 {
		t.Helper()
		return pgtest.ReadIn(t, conn, func(tx pgx.Tx) {
			envs, _, err := envelope.LockMany(ctx, tx, ids, true)
			require.NoError(t, err)
			require.Len(t, envs, want)
			_, err = envelope.Existing(ctx, tx, ids)
			require.NoError(t, err)
			recs := make([]envelope.Record, len(ids))
			for i, id := range ids {
				recs[i] = envelope.Record{EnvelopeID: id, Status: envelope.StatusDone, Result: json.RawMessage(`{}`),
					Attempt: envelope.Attempt{Attempt: 1, Outcome: envelope.OutcomeDone, StartedAt: time.Now()}}
			}
			// A failed one keeps a copy of its body in its row: FinishMany's
			// second statement reads it from envelope_body.
			recs[0].Status, recs[0].Attempt.Outcome, recs[0].Attempt.Error = envelope.StatusFailed, envelope.OutcomeFailed, "x"
			done, err := envelope.FinishMany(ctx, tx, "w", recs)
			require.NoError(t, err)
			require.Len(t, done, want)
		}, parts...)
	}

	// The connection's first calls, on empty tables.
	for range 8 {
		batch([]int64{1, 2}, 0)
	}

	// A peak leaves 50,000 envelopes pending in today's partition.
	const backlog = 50_000
	envelopetest.InsertMany(t, b.pool, backlog, func(int) envelopetest.Row { return envelopetest.Row{} })
	part := pgtest.Scalar[string](t, b.pool, `SELECT tableoid::regclass::text FROM envelope LIMIT 1`)
	require.Equal(t, backlog, pgtest.Count(t, b.pool, `SELECT count(*) FROM `+part), "the backlog is in one partition")
	require.Zero(t, pgtest.Count(t, b.pool, `SELECT count(*) FROM pg_stats WHERE tablename = $1`, part), "and it has no statistics")
	// Its bodies in envelope_body too, as ingest stores them, where the
	// lock's join and the failed envelope's copy find them. (The rows keep
	// theirs: taking them out would leave every row a dead version, which a
	// peak's pending rows do not have.)
	b.exec(t, `INSERT INTO envelope_body (id, body, payload) SELECT id, body, payload FROM `+part)
	bodies := pgtest.Scalar[string](t, b.pool, `SELECT tableoid::regclass::text FROM envelope_body LIMIT 1`)
	require.Zero(t, pgtest.Count(t, b.pool, `SELECT count(*) FROM pg_stats WHERE tablename = $1`, bodies), "it has no statistics either")

	// The worker drains it, 60 at a time: each of the three statements reads
	// the batch's rows, nowhere near the backlog. 25 batches are enough for
	// the connection's custom plans to give way to its generic plan, were
	// the statements prepared.
	const size = 60
	for n := range 25 {
		ids := pgtest.Scalar[[]int64](t, b.pool, `
			SELECT array_agg(id ORDER BY id) FROM (SELECT id FROM envelope WHERE status = 'pending' ORDER BY id LIMIT $1) x`, size)
		read := batch(ids, size, part, bodies)
		require.GreaterOrEqual(t, read, int64(2*size), "the batch's entries of both primary keys are counted")
		// An entry of the primary key per statement and envelope, one of
		// envelope_body's per envelope for the lock's join, and one of each
		// for the failed envelope's copy.
		require.LessOrEqual(t, read, int64(4*size+2), "batch %d read %d rows of %s and %s, with %d pending", n, read, part, bodies, backlog-n*size)
	}
	require.Equal(t, 25*(size-1), pgtest.Count(t, b.pool, `SELECT count(*) FROM envelope WHERE status = 'done'`))
	require.Equal(t, 25, pgtest.Count(t, b.pool, `SELECT count(*) FROM envelope WHERE status = 'failed'`))

	// And FinishMany's plan holds only the batch's partition: a day's
	// partitions are all large under retention, and a plan over every one
	// would look each id up in each of them.
	ids := pgtest.Scalar[[]int64](t, b.pool, `SELECT array_agg(id) FROM (SELECT id FROM envelope WHERE status = 'pending' LIMIT $1) x`, size)
	n := len(ids)
	tx, err := conn.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }() // before the connection goes back to the pool
	rows, err := tx.Query(ctx, "EXPLAIN "+envelope.FinishManySQL, pg.PlanEachCall, ids, make([]string, n), make([][]byte, n),
		make([]*string, n), make([]int64, n), make([]int32, n), make([]string, n), make([]time.Time, n), "w", make([]*string, n))
	require.NoError(t, err)
	plan, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	var updated []string
	for _, line := range plan {
		if rel, ok := strings.CutPrefix(strings.TrimSpace(line), "Update on "); ok {
			updated = append(updated, strings.Fields(rel)[0])
		}
	}
	require.Equal(t, []string{part}, updated, strings.Join(plan, "\n"))
}

// Ingest's lookups on the conflict path (the stored envelopes of duplicate
// deliveries; the holders of replay digests already claimed) read the keys
// they look up, not the tables, on a pool like ingest's (each statement
// planned once per connection: pg.Options.GenericPlans) whose first calls
// found the tables vacuumed empty, as on a new deployment after a VACUUM.
// Prepared there, their plans are sequential scans of every partition of
// envelope_key and envelope, hash-joined, and of envelope_digest, at every
// duplicate.
func TestIngestConflictLookupsReadTheirKeysNotTheTables(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, err := pg.Open(ctx, pgtest.NewURL(t), pg.Options{MaxConns: 2, GenericPlans: true})
	require.NoError(t, err)
	defer pool.Close()
	_, err = pool.Exec(ctx, `VACUUM envelope_key, envelope, envelope_digest`)
	require.NoError(t, err)
	c, err := pool.Acquire(ctx)
	require.NoError(t, err)
	defer c.Release()
	conn := c.Conn()

	digest := func(id string) []byte { d := sha256.Sum256([]byte(id)); return d[:] }
	// lookup runs both lookups of sources "src" and ids in one transaction,
	// and returns what they found and how many rows and index entries of
	// rels they read.
	lookup := func(ids []string, rels ...string) (stored, held int, read int64) {
		t.Helper()
		sources, digests := make([]string, len(ids)), make([][]byte, len(ids))
		for i, id := range ids {
			sources[i], digests[i] = "src", digest(id)
		}
		read = pgtest.ReadIn(t, conn, func(tx pgx.Tx) {
			var err error
			stored, held, err = envelope.ConflictLookups(ctx, tx, sources, ids, digests)
			require.NoError(t, err)
		}, rels...)
		return stored, held, read
	}

	// The connection's first calls, on the empty tables.
	for i := range 8 {
		stored, held, _ := lookup([]string{fmt.Sprint("none-", i)})
		require.Zero(t, stored+held)
	}

	// 50,000 deliveries stored, each with its replay digest claimed.
	const stored = 50_000
	ids := make([]string, stored)
	for i := range ids {
		ids[i] = fmt.Sprint("k-", i)
	}
	envelopetest.InsertMany(t, pool, stored, func(i int) envelopetest.Row { return envelopetest.Row{DeliveryID: ids[i]} })
	_, err = pool.Exec(ctx, `
		INSERT INTO envelope_digest (source, digest, delivery_id, expires_at)
		SELECT 'src', sha256(convert_to(id, 'UTF8')), id, now() + interval '1 hour' FROM unnest($1::text[]) id`, ids)
	require.NoError(t, err)
	rels := pgtest.Scalar[[]string](t, pool, `
		SELECT array_agg(c::text) FROM (
			SELECT inhrelid::regclass AS c FROM pg_inherits WHERE inhparent = 'envelope_key'::regclass
			UNION ALL SELECT tableoid::regclass FROM (SELECT tableoid FROM envelope LIMIT 1) e
			UNION ALL SELECT 'envelope_digest'::regclass) x`)

	// 60 of them resent: each lookup reads an entry of a primary key per
	// delivery (the key's, the envelope's, the digest's).
	const size = 60
	for n := range 5 {
		found, held, read := lookup(ids[n*size:(n+1)*size], rels...)
		require.Equal(t, size, found)
		require.Equal(t, size, held)
		require.GreaterOrEqual(t, read, int64(3*size), "the entries of the three primary keys are counted")
		require.LessOrEqual(t, read, int64(4*size), "lookup %d read %d rows and index entries, with %d deliveries stored", n, read, stored)
	}
}
