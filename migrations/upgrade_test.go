package migrations_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/inboxhq/inbox/internal/envelope"
	"github.com/inboxhq/inbox/internal/envelope/envelopetest"
	"github.com/inboxhq/inbox/internal/pgtest"
	"github.com/inboxhq/inbox/migrations"
)

// An inbox running the layout before 00190 (one table per kind) is
// upgraded in place: every envelope, attempt, duplicate, conflict and
// posting is kept and reachable as before; its delivery ids still dedup;
// the counts still equal a scan; the postings name their delivery; new
// envelopes go to the new partitions; and the legacy partition is dropped
// like any other once it is past the window, its postings kept.
func TestUpgradeToPartitionedEnvelopesKeepsEverything(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.EmptyURL(t)
	pool := pgtest.OpenPool(t, url)
	require.NoError(t, migrations.MigrateTo(ctx, pool, 182))

	// The old layout, seeded as the old release wrote it.
	exec := func(sql string, args ...any) {
		t.Helper()
		_, err := pool.Exec(ctx, sql, args...)
		require.NoError(t, err, sql)
	}
	exec(`
		INSERT INTO envelope (source, provider, delivery_id, event_type, status, body, payload, body_sha256, body_size, received_at, processed_at, attempts)
		SELECT 'src', 'standard', 'old-' || g, 'payment.succeeded', CASE WHEN g % 10 = 0 THEN 'failed' ELSE 'done' END,
		       convert_to('{"n":' || g || '}', 'UTF8'), ('{"n":' || g || '}')::jsonb, sha256(convert_to('{"n":' || g || '}', 'UTF8')),
		       octet_length('{"n":' || g || '}'), now() - interval '40 days' + g * interval '1 minute', now() - interval '40 days' + g * interval '1 minute', 1
		  FROM generate_series(1, 200) g`)
	exec(`INSERT INTO envelope_attempt (envelope_id, job_id, attempt, outcome, started_at) SELECT id, id, 1, status, received_at FROM envelope`)
	exec(`INSERT INTO envelope_duplicate (envelope_id) SELECT id FROM envelope WHERE id % 20 = 0`)
	exec(`INSERT INTO envelope_conflict (envelope_id, source, delivery_id, body_sha256, body_size, body) SELECT id, source, delivery_id, sha256(body || 'x'), body_size + 1, body || 'x' FROM envelope WHERE id % 50 = 0`)
	var postedID int64
	require.NoError(t, pool.QueryRow(ctx, `SELECT id FROM envelope WHERE delivery_id = 'old-7'`).Scan(&postedID))
	// The old release's posting: a transaction and its two entries, in the
	// columns the ledger had then (today's ledger.Post writes columns that
	// migration 00190 adds).
	exec(`INSERT INTO ledger_account (merchant, name) VALUES ('m', 'psp_clearing'), ('m', 'sales')`)
	exec(`
		WITH t AS (
			INSERT INTO ledger_transaction (envelope_id, idempotency_key, kind, merchant, payment_key, currency, amount_minor, description)
			VALUES ($1, 'standard:m:payment:old-7', 'payment', 'm', 'standard:m:payment:old-7', 'USD', 700, '')
			RETURNING id)
		INSERT INTO ledger_entry (transaction_id, account_id, currency, amount_minor)
		SELECT t.id, a.id, 'USD', CASE a.name WHEN 'psp_clearing' THEN 700 ELSE -700 END
		  FROM t, ledger_account a WHERE a.merchant = 'm'`, postedID)
	// Each table's rows, as a count and a sum of their hashes (the ledger's
	// by the columns it had: 00190 adds two).
	counts := func(table string) string {
		row := "t::text"
		if table == "ledger_transaction" {
			row = "(t.id, t.envelope_id, t.idempotency_key, t.kind, t.merchant, t.payment_key, t.currency, t.amount_minor, t.description, t.posted_at)::text"
		}
		var s string
		require.NoError(t, pool.QueryRow(ctx, fmt.Sprintf(`SELECT count(*) || ':' || coalesce(sum(hashtext(%s)), 0) FROM %s t`, row, table)).Scan(&s))
		return s
	}
	tables := []string{"envelope", "envelope_attempt", "envelope_duplicate", "envelope_conflict", "ledger_transaction", "ledger_entry"}
	before := map[string]string{}
	for _, table := range tables {
		before[table] = counts(table)
	}
	var lastOldID int64
	require.NoError(t, pool.QueryRow(ctx, `SELECT max(id) FROM envelope`).Scan(&lastOldID))

	require.NoError(t, migrations.Migrate(ctx, pool, io.Discard))

	for _, table := range tables[4:] {
		require.Equal(t, before[table], counts(table), "%s changed", table)
	}
	for _, table := range tables[:4] {
		require.Equal(t, before[table], counts(table), "%s changed", table)
		var part string
		require.NoError(t, pool.QueryRow(ctx, `SELECT DISTINCT tableoid::regclass::text FROM `+table).Scan(&part))
		require.Equal(t, table+"_legacy", part)
	}
	require.Equal(t, 200, pgtest.Count(t, pool, `SELECT count(*) FROM envelope_key k JOIN envelope e ON e.id = k.envelope_id AND e.delivery_id = k.delivery_id`))
	require.Equal(t, 1, pgtest.Count(t, pool, `SELECT count(*) FROM ledger_transaction_audit WHERE envelope_id = $1 AND delivery_id = 'old-7' AND source = 'src' AND provider = 'standard'`, postedID))
	require.Equal(t, 4, pgtest.Count(t, pool, `SELECT count(*) FROM envelope_conflict_audit`))
	require.Equal(t, 200, pgtest.Count(t, pool, `SELECT count(*) FROM envelope_audit`))
	var scan, counted string
	require.NoError(t, pool.QueryRow(ctx, `
		SELECT (SELECT string_agg(status || '=' || n, ' ' ORDER BY status) FROM (SELECT status, count(*) n FROM envelope GROUP BY 1) x),
		       (SELECT string_agg(kind || '=' || n, ' ' ORDER BY kind) FROM (SELECT kind, sum(n) n FROM envelope_count WHERE kind IN ('done', 'failed') GROUP BY 1) y)`).Scan(&scan, &counted))
	require.Equal(t, scan, counted)

	// Old ids still dedup; new deliveries go to today's partition, with ids
	// above every old one.
	rc, err := envelope.NewInsertClient(pool, slog.New(slog.NewTextHandler(io.Discard, nil)))
	require.NoError(t, err)
	store := envelope.NewStore(pool, rc)
	old := envelope.NewDelivery{Source: "src", Provider: "standard", DeliveryID: "old-7", EventType: "payment.succeeded",
		Body: []byte(`{"n":7}`), Payload: []byte(`{"n":7}`)}
	res, err := store.Insert(ctx, old)
	require.NoError(t, err)
	require.Equal(t, envelope.InsertResult{EnvelopeID: postedID, Duplicate: true}, res)
	fresh := old
	fresh.DeliveryID = "new-1"
	res, err = store.Insert(ctx, fresh)
	require.NoError(t, err)
	require.False(t, res.Duplicate)
	require.Greater(t, res.EnvelopeID, lastOldID)
	var part string
	require.NoError(t, pool.QueryRow(ctx, `SELECT tableoid::regclass::text FROM envelope WHERE id = $1`, res.EnvelopeID).Scan(&part))
	require.Regexp(t, `^envelope_\d{8}(h\d\d)?$`, part)

	// The legacy partition goes whole once past the window; postings stay.
	// The cutoff is its own upper bound: now + a minute would take today's
	// partition too in the last minute of a UTC day.
	parts, err := envelope.Partitions(ctx, pool)
	require.NoError(t, err)
	require.Equal(t, "legacy", parts[0].Name)
	drops, err := envelope.DropPartitions(ctx, pool, parts[0].UpperAt, time.Second, false)
	require.NoError(t, err)
	require.Equal(t, []envelope.PartitionDrop{{Name: "legacy", UpperAt: drops[0].UpperAt, Outcome: envelope.PartitionDropped, Envelopes: 200}}, drops)
	require.Equal(t, 1, pgtest.Count(t, pool, `SELECT count(*) FROM envelope`))
	require.Equal(t, before["ledger_transaction"], counts("ledger_transaction"))
	require.Equal(t, 1, pgtest.Count(t, pool, `SELECT count(*) FROM ledger_transaction_audit WHERE envelope_id = $1 AND delivery_id = 'old-7' AND provider IS NULL`, postedID))
	res, err = store.Insert(ctx, old)
	require.NoError(t, err)
	require.False(t, res.Duplicate, "an id past the window is new again")
}

// Migration 00203, on a small inbox, unmarks the days 00200 marked
// bodies_in_rows that hold no body in a row without its copy in
// envelope_body (the day 00200 ran, on a new install), and keeps the mark
// of a day that does: a body search reads the first through the body
// index, the second row by row.
func TestBodyIndexMigrationUnmarksDaysWithoutBodiesInRows(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.EmptyURL(t)
	pool := pgtest.OpenPool(t, url)
	require.NoError(t, migrations.MigrateTo(ctx, pool, 202))
	now := time.Now()
	recent := now.Add(-time.Minute) // today's, or yesterday's in the first minute of a UTC day

	// Today's, as ingest stores since 00200 (a failed one with its copy),
	// then marked as 00200 marked the day it ran.
	envelopetest.InsertMany(t, pool, 3, func(i int) envelopetest.Row {
		r := envelopetest.Row{Status: "done", ReceivedAt: recent}
		if i == 2 {
			r.Status, r.LastError = "failed", "permanent: x"
		}
		return r
	})
	require.EqualValues(t, 3, envelopetest.MoveBodies(t, pool))
	// Two days back, as before 00200: the body in the row only.
	envelopetest.InsertMany(t, pool, 1, func(int) envelopetest.Row {
		return envelopetest.Row{Status: "done", ReceivedAt: now.Add(-48 * time.Hour)}
	})
	partition := func(at time.Time) string {
		var name string
		require.NoError(t, pool.QueryRow(ctx, `SELECT name FROM envelope_partition WHERE dropped_at IS NULL AND lower_id <= envelope_id_at($1) AND upper_id > envelope_id_at($1)`, at).Scan(&name))
		return name
	}
	today, old := partition(recent), partition(now.Add(-48*time.Hour))
	_, err := pool.Exec(ctx, `UPDATE envelope_partition SET bodies_in_rows = true WHERE name = $1`, today)
	require.NoError(t, err)
	require.NoError(t, migrations.Migrate(ctx, pool, io.Discard))
	marked := func(name string) bool {
		var b bool
		require.NoError(t, pool.QueryRow(ctx, `SELECT bodies_in_rows FROM envelope_partition WHERE name = $1`, name).Scan(&b))
		return b
	}
	require.False(t, marked(today), "today's bodies are all in envelope_body")
	require.True(t, marked(old), "a body only in its row")
	chunks, err := envelope.PlanScan(ctx, pool, now.Add(-72*time.Hour), now.Add(time.Hour), 1<<40)
	require.NoError(t, err)
	indexed := map[string]bool{}
	for _, c := range chunks {
		indexed[c.Partition] = c.BodyIndexed
	}
	require.Equal(t, map[string]bool{today: true, old: false}, map[string]bool{today: indexed[today], old: indexed[old]})
}

// Migration 00204 on a large inbox (100,000 envelopes or more) builds the
// headers index of the partitions to come only: the days stored so far
// are not indexed (a header search walks them), and the build
// docs/operations.md gives an operator, CREATE INDEX CONCURRENTLY then
// ATTACH, indexes one without holding ingest.
func TestHeadersIndexMigrationOnALargeInboxIndexesDaysToCome(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.EmptyURL(t)
	pool := pgtest.OpenPool(t, url)
	require.NoError(t, migrations.MigrateTo(ctx, pool, 203))
	now := time.Now()
	id := envelopetest.InsertMany(t, pool, 1, func(int) envelopetest.Row {
		return envelopetest.Row{Status: "done", ReceivedAt: now.Add(-time.Minute), Headers: map[string]string{"X-Shopify-Shop-Domain": "a.myshopify.com"}}
	})[0]
	// As large as the threshold, by the counters the migration reads.
	_, err := pool.Exec(ctx, `UPDATE envelope_count SET n = n + 100000 WHERE kind = 'done'`)
	require.NoError(t, err)
	var before time.Time
	require.NoError(t, pool.QueryRow(ctx, `SELECT now()`).Scan(&before))
	require.NoError(t, migrations.Migrate(ctx, pool, io.Discard))
	_, err = pool.Exec(ctx, `UPDATE envelope_count SET n = n - 100000 WHERE kind = 'done'`)
	require.NoError(t, err)

	indexed := func() map[string]bool {
		chunks, err := envelope.PlanScan(ctx, pool, now.Add(-time.Hour), now.Add(72*time.Hour), 1<<40)
		require.NoError(t, err)
		out := map[string]bool{}
		for _, c := range chunks {
			out[c.Partition] = c.HeadersIndexed
		}
		return out
	}
	var today string
	require.NoError(t, pool.QueryRow(ctx, `SELECT name FROM envelope_partition WHERE dropped_at IS NULL AND lower_id <= $1 AND upper_id > $1`, id).Scan(&today))
	days := indexed()
	require.Greater(t, len(days), 1, "the envelope's day and the days made ahead: %v", days)
	require.False(t, days[today], "the envelope's day, stored before: %v", days)
	for day, ok := range days {
		var toCome bool
		require.NoError(t, pool.QueryRow(ctx, `SELECT lower_at > $2 FROM envelope_partition WHERE name = $1`, day, before).Scan(&toCome))
		require.Equal(t, toCome, ok, "%s: only the days to come are indexed: %v", day, days)
	}

	// docs/operations.md, "Upgrading to the headers index".
	_, err = pool.Exec(ctx, fmt.Sprintf(`CREATE INDEX CONCURRENTLY envelope_%s_headers_idx ON envelope_%s USING gin ((lower(headers::text)::jsonb) jsonb_path_ops)`, today, today))
	require.NoError(t, err)
	_, err = pool.Exec(ctx, fmt.Sprintf(`ALTER INDEX envelope_headers_idx ATTACH PARTITION envelope_%s_headers_idx`, today))
	require.NoError(t, err)
	require.True(t, indexed()[today])
	var lower, upper int64
	require.NoError(t, pool.QueryRow(ctx, `SELECT lower_id, upper_id FROM envelope_partition WHERE name = $1`, today).Scan(&lower, &upper))
	ids, complete, err := envelope.HeaderMatches(ctx, pool, map[string]string{"x-shopify-shop-domain": "a.myshopify.com"}, lower, upper, 10)
	require.NoError(t, err)
	require.True(t, complete)
	require.Equal(t, []int64{id}, ids)
}
