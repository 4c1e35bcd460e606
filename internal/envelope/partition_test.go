package envelope_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/inboxhq/inbox/internal/envelope"
	"github.com/inboxhq/inbox/internal/envelope/envelopetest"
	"github.com/inboxhq/inbox/internal/pgtest"
)

// An envelope id says when it was stored, and lands in that day's
// partition; IDAt agrees with the database's envelope_id_at.
func TestEnvelopeIDsAreTimeOrderedAndPartitioned(t *testing.T) {
	t.Parallel()
	b := setupStore(t, envelope.StoreOptions{})
	ctx := context.Background()
	res, err := b.store.Insert(ctx, ghDelivery("d-1", `{}`))
	require.NoError(t, err)
	var storedAt, receivedAt time.Time
	var part string
	require.NoError(t, b.pool.QueryRow(ctx, `
		SELECT envelope_id_time(e.id), e.received_at, e.tableoid::regclass::text FROM envelope e WHERE e.id = $1`, res.EnvelopeID,
	).Scan(&storedAt, &receivedAt, &part))
	require.Equal(t, receivedAt.Truncate(time.Second).UTC(), storedAt.UTC())
	require.Equal(t, "envelope_"+receivedAt.UTC().Format("20060102"), part)

	for _, at := range []time.Time{time.Unix(1577836800, 0), time.Date(2026, 12, 2, 13, 4, 5, 999_999_000, time.UTC), time.Now()} {
		var want int64
		require.NoError(t, b.pool.QueryRow(ctx, `SELECT envelope_id_at($1)`, at).Scan(&want))
		require.Equal(t, want, envelope.IDAt(at), "%s", at)
	}
	require.Less(t, envelope.IDAt(time.Time{}), envelope.IDAt(time.Unix(0, 0)))
	// Below 2^53 (JSON numbers, JavaScript) until 2088.
	require.Less(t, envelope.IDAt(time.Date(2088, 1, 1, 0, 0, 0, 0, time.UTC)), int64(1)<<53)
}

// Two copies of one delivery whose transactions straddle a partition
// boundary: the first, stored in yesterday's partition, is still
// uncommitted when the second arrives today. The second waits on the key
// (not on any partition), and is answered as a duplicate of the first
// once it commits; had the first rolled back, it would be stored.
func TestTwoCopiesStraddlingAPartitionBoundaryStoreOnce(t *testing.T) {
	t.Parallel()
	b := setupStore(t, envelope.StoreOptions{})
	ctx := context.Background()
	today := time.Now().UTC().Truncate(24 * time.Hour) // read once: the test may cross midnight
	yesterday := today.Add(-time.Second)
	envelopetest.Insert(t, b.pool, envelopetest.Row{ReceivedAt: yesterday}) // makes yesterday's partition

	for _, commit := range []bool{true, false} {
		d := ghDelivery("straddle-"+map[bool]string{true: "commit", false: "rollback"}[commit], `{"n":1}`)
		sum := sha256.Sum256(d.Body)
		first := pgtest.Tx(t, b.pool)
		var firstID int64
		require.NoError(t, first.QueryRow(ctx, `
			WITH e AS (
				INSERT INTO envelope (id, source, provider, delivery_id, event_type, body, payload, headers, body_sha256, body_size, received_at)
				VALUES (envelope_id_at($5) | (nextval('envelope_id_seq') & 1048575), $1, 'github', $2, 'push', convert_to($3::text, 'UTF8'), $3::jsonb, '{}', $4, octet_length($3::text), $5)
				RETURNING id, source, delivery_id)
			INSERT INTO envelope_key (delivery_id, source, envelope_id) SELECT delivery_id, source, id FROM e RETURNING envelope_id`,
			d.Source, d.DeliveryID, string(d.Body), sum[:], yesterday).Scan(&firstID))

		type answer struct {
			res envelope.InsertResult
			err error
		}
		second := make(chan answer, 1)
		go func() {
			res, err := b.store.Insert(ctx, d)
			second <- answer{res, err}
		}()
		pgtest.Eventually(t, 10*time.Second, "the second copy waits for the first's key", func() (bool, string) {
			n := pgtest.Count(t, b.pool, `SELECT count(*) FROM `+pgtest.Locks+` l WHERE NOT granted AND locktype = 'transactionid'`)
			return n == 1, "not waiting"
		})
		if commit {
			require.NoError(t, first.Commit(ctx))
		} else {
			require.NoError(t, first.Rollback(ctx))
		}
		got := <-second
		require.NoError(t, got.err)
		if commit {
			require.Equal(t, envelope.InsertResult{EnvelopeID: firstID, Duplicate: true}, got.res)
		} else {
			require.False(t, got.res.Duplicate)
			require.NotEqual(t, firstID, got.res.EnvelopeID)
			require.Greater(t, got.res.EnvelopeID, envelope.IDAt(today), "stored in today's partition (or a later one)")
		}
		require.Equal(t, 1, pgtest.Count(t, b.pool, `SELECT count(*) FROM envelope WHERE delivery_id = $1`, d.DeliveryID))
		require.Equal(t, 1, pgtest.Count(t, b.pool, `SELECT count(*) FROM envelope_key WHERE delivery_id = $1`, d.DeliveryID))
	}
}

// A redelivery of an id stored yesterday (another partition) is a
// duplicate of it, and one with another body a conflict recorded in
// yesterday's partitions: the key, not the partition, decides.
func TestRedeliveryAcrossPartitionsIsADuplicate(t *testing.T) {
	t.Parallel()
	b := setupStore(t, envelope.StoreOptions{})
	ctx := context.Background()
	first, err := b.store.Insert(ctx, ghDelivery("across", `{"n":1}`))
	require.NoError(t, err)
	at := time.Now().Add(-30 * time.Hour) // one instant: its day is the partitions'
	moved := envelopetest.MoveTo(t, b.pool, first.EnvelopeID, at)

	again, err := b.store.Insert(ctx, ghDelivery("across", `{"n":1}`))
	require.NoError(t, err)
	require.Equal(t, envelope.InsertResult{EnvelopeID: moved, Duplicate: true}, again)
	_, err = b.store.Insert(ctx, ghDelivery("across", `{"n":2}`))
	var conflict *envelope.ConflictError
	require.ErrorAs(t, err, &conflict)
	require.Equal(t, moved, conflict.EnvelopeID)
	require.Equal(t, 1, pgtest.Count(t, b.pool, `SELECT count(*) FROM envelope`))
	var dupPart, conflictPart string
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT (SELECT tableoid::regclass::text FROM envelope_duplicate WHERE envelope_id = $1),
		(SELECT tableoid::regclass::text FROM envelope_conflict WHERE envelope_id = $1)`, moved).Scan(&dupPart, &conflictPart))
	day := at.UTC().Format("20060102")
	require.Equal(t, []string{"envelope_duplicate_" + day, "envelope_conflict_" + day}, []string{dupPart, conflictPart})
}

// EnsurePartitions keeps partitions ahead at the width asked (from the
// newest one's end), refuses other widths, and creating none twice.
func TestEnsurePartitionsAhead(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	before, err := envelope.PartitionHorizon(ctx, pool)
	require.NoError(t, err)
	require.Greater(t, time.Until(before), 2*24*time.Hour, "migrated with 3 days ahead")

	n, err := envelope.EnsurePartitions(ctx, pool, envelope.DefaultPartitionsAhead, envelope.PartitionDay)
	require.NoError(t, err)
	require.Zero(t, n, "nothing missing")
	// Up to 4.5 h past the newest partition's end: five hourly ones.
	n, err = envelope.EnsurePartitions(ctx, pool, time.Until(before)+4*time.Hour+30*time.Minute, envelope.PartitionHour)
	require.NoError(t, err)
	require.Equal(t, 5, n, "five hours, one partition each")
	parts, err := envelope.Partitions(ctx, pool)
	require.NoError(t, err)
	last := parts[len(parts)-1]
	require.Equal(t, time.Hour, last.UpperAt.Sub(last.LowerAt))
	require.Regexp(t, `^\d{8}h\d{2}$`, last.Name)
	for i := 1; i < len(parts); i++ {
		require.Equal(t, parts[i-1].UpperAt, parts[i].LowerAt, "no gap, no overlap")
	}
	// 0: as wide as the newest one.
	n, err = envelope.EnsurePartitions(ctx, pool, time.Until(before)+6*time.Hour+30*time.Minute, 0)
	require.NoError(t, err)
	require.Equal(t, 2, n)

	_, err = envelope.EnsurePartitions(ctx, pool, time.Hour, 2*time.Hour)
	require.ErrorContains(t, err, "must be 1h or 24h")
	_, err = pool.Exec(ctx, `SELECT envelope_partitions_ensure(interval '1 day', interval '30 minutes')`)
	require.ErrorContains(t, err, "must be 1 hour or 1 day")
}

// A delivery's body and payload live in envelope_body (migration 00200),
// written by ingest's insert, on the partition bounds of envelope: the
// envelope row holds neither, so the row the worker updates stays small and
// retention drops bodies a partition at a time. A failed envelope gets a
// copy in its row (replays stay possible after its body partition goes).
// Every partition made since has its body partition.
func TestBodiesLiveInTheirOwnTableAndAFailedEnvelopeKeepsACopy(t *testing.T) {
	t.Parallel()
	b := setupStore(t, envelope.StoreOptions{})
	ctx := context.Background()
	_, err := b.pool.Exec(ctx, `SELECT envelope_partition_create(date_trunc('day', now()) + interval '30 days', date_trunc('day', now()) + interval '31 days')`)
	require.NoError(t, err)
	require.Zero(t, pgtest.Count(t, b.pool, `
		SELECT count(*) FROM envelope_partition p
		 WHERE p.dropped_at IS NULL AND NOT p.bodies_in_rows AND to_regclass('envelope_body_' || p.name) IS NULL`))
	require.Greater(t, pgtest.Count(t, b.pool, `SELECT count(*) FROM pg_inherits WHERE inhparent = 'envelope_body'::regclass`), 4)

	const n = 3
	var ids []int64
	bodies := map[int64]string{}
	for i := range n {
		// ~1.6 KB: digests that do not compress, and line items that do.
		var sb strings.Builder
		fmt.Fprintf(&sb, `{"id":"evt_%d","fingerprint":"`, i)
		for j := range 12 {
			sum := sha256.Sum256([]byte{byte(i), byte(j)})
			sb.WriteString(hex.EncodeToString(sum[:]))
		}
		sb.WriteString(`","items":[`)
		for j := range 12 {
			fmt.Fprintf(&sb, `%s{"sku":"sku_%d","qty":%d,"description":"Widget, standard edition, boxed"}`, map[bool]string{true: ",", false: ""}[j > 0], j, j%3+1)
		}
		sb.WriteString(`]}`)
		res, err := b.store.Insert(ctx, ghDelivery(fmt.Sprintf("own-table-%d", i), sb.String()))
		require.NoError(t, err)
		ids = append(ids, res.EnvelopeID)
		bodies[res.EnvelopeID] = sb.String()
	}
	require.Equal(t, n, pgtest.Count(t, b.pool, `SELECT count(*) FROM envelope WHERE id = ANY($1) AND body IS NULL AND payload IS NULL`, ids), "no body in the rows")
	for _, id := range ids {
		var body []byte
		var payload, part, day string
		require.NoError(t, b.pool.QueryRow(ctx, `SELECT b.body, b.payload::text, b.tableoid::regclass::text, to_char(e.received_at AT TIME ZONE 'UTC', 'YYYYMMDD')
			FROM envelope_body b JOIN envelope e USING (id) WHERE id = $1`, id).Scan(&body, &payload, &part, &day))
		require.Equal(t, bodies[id], string(body), "byte for byte")
		require.JSONEq(t, bodies[id], payload)
		require.Equal(t, "envelope_body_"+day, part, "the partition of the envelope's day")
		e, err := envelope.Get(ctx, b.pool, id)
		require.NoError(t, err)
		require.Equal(t, bodies[id], string(e.Body), "read through envelope_body")
	}

	// One done, one failed: the failed one gets its copy.
	require.NoError(t, pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		_, err := envelope.FinishMany(ctx, tx, "w", []envelope.Record{
			{EnvelopeID: ids[0], Status: envelope.StatusDone, Result: json.RawMessage(`{"posted":true,"transaction_id":1234567890}`),
				Attempt: envelope.Attempt{Attempt: 1, Outcome: envelope.OutcomeDone, StartedAt: time.Now()}},
			{EnvelopeID: ids[1], Status: envelope.StatusFailed,
				Attempt: envelope.Attempt{Attempt: 1, Outcome: envelope.OutcomeFailed, Error: "permanent: no", Cause: "unknown_currency", StartedAt: time.Now()}},
		})
		return err
	}))
	var copied []byte
	var copiedPayload string
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT body, payload::text FROM envelope WHERE id = $1`, ids[1]).Scan(&copied, &copiedPayload))
	require.Equal(t, bodies[ids[1]], string(copied), "the failed envelope's copy, byte for byte")
	require.JSONEq(t, bodies[ids[1]], copiedPayload)
	require.Equal(t, n-1, pgtest.Count(t, b.pool, `SELECT count(*) FROM envelope WHERE id = ANY($1) AND body IS NULL AND payload IS NULL`, ids), "the done and the pending one hold none")
}
