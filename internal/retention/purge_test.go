package retention_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/inboxhq/inbox/internal/envelope"
	"github.com/inboxhq/inbox/internal/envelope/envelopetest"
	"github.com/inboxhq/inbox/internal/ledger"
	"github.com/inboxhq/inbox/internal/pgtest"
	"github.com/inboxhq/inbox/internal/retention"
)

type bundle struct {
	ctx  context.Context
	pool *pgxpool.Pool
	// worker is logged in as a member of inbox_worker only: purges run
	// with the worker's privileges.
	worker *pgxpool.Pool
}

func setup(t *testing.T) *bundle {
	t.Helper()
	url := pgtest.NewURL(t)
	pool := pgtest.OpenPool(t, url)
	worker := pgtest.OpenPool(t, pgtest.RoleURL(t, url, pgtest.RoleWorker))
	return &bundle{ctx: context.Background(), pool: pool, worker: worker}
}

var deliveries atomic.Int64

// row describes one envelope to seed.
type row struct {
	status string // pending, done, failed, ignored
	// age is how many days ago the envelope was processed (received one
	// hour before that); a pending envelope was received age days ago.
	age    int
	ledger bool // a ledger transaction references it
	purged bool // its body was dropped already
	// dependent rows
	attempts, replays, conflicts int
}

// seed inserts r and returns its id.
func (b *bundle) seed(t *testing.T, r row) int64 {
	t.Helper()
	n := deliveries.Add(1)
	now := time.Now()
	processed := now.Add(-time.Duration(r.age) * 24 * time.Hour)
	received := processed.Add(-time.Hour)
	e := envelopetest.Row{DeliveryID: fmt.Sprintf("msg_%d", n), Status: r.status, Body: fmt.Appendf(nil, `{"delivery":%d}`, n),
		ReceivedAt: received, ProcessedAt: processed, Attempts: r.attempts, Result: json.RawMessage(`{"ok":true}`)}
	if r.status == "failed" {
		e.LastError = "permanent: bad payload"
	}
	if r.purged {
		e.NoBody, e.NoPayload, e.BodyPurgedAt = true, true, processed.Add(30*24*time.Hour)
	}
	id := envelopetest.Insert(t, b.pool, e)
	for i := 1; i <= r.attempts; i++ {
		outcome := "retry"
		if i == r.attempts {
			outcome = "done"
		}
		envelopetest.InsertAttempt(t, b.pool, envelopetest.Attempt{EnvelopeID: id, JobID: 1, Attempt: i, Outcome: outcome,
			StartedAt: received, FinishedAt: received, Worker: "test"})
	}
	for range r.replays {
		envelopetest.InsertReplay(t, b.pool, envelopetest.Replay{EnvelopeID: id, Actor: "alice", Reason: "test", PriorStatus: "failed", ReplayedAt: processed})
	}
	for range r.conflicts {
		envelopetest.InsertConflict(t, b.pool, envelopetest.Conflict{EnvelopeID: id, Body: []byte("other")})
	}
	if r.ledger {
		err := pgx.BeginFunc(b.ctx, b.pool, func(tx pgx.Tx) error {
			_, err := ledger.Post(b.ctx, tx, id, ledger.Posting{
				Kind: ledger.KindPayment, IdempotencyKey: fmt.Sprintf("standard:m:payment:%d", n),
				Merchant: "m", Currency: "USD", AmountMinor: 100,
			})
			return err
		})
		require.NoError(t, err)
	}
	return id
}

// snapshot returns every row of the envelope tables and the ledger, as JSON
// keyed by table and id.
func (b *bundle) snapshot(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, table := range []string{"envelope", "envelope_attempt", "envelope_replay", "envelope_conflict", "ledger_transaction", "ledger_entry"} {
		rows, err := b.pool.Query(b.ctx, `SELECT id, to_jsonb(x)::text FROM `+table+` x`)
		require.NoError(t, err)
		var id int64
		var js string
		_, err = pgx.ForEachRow(rows, []any{&id, &js}, func() error {
			out[fmt.Sprintf("%s/%d", table, id)] = js
			return nil
		})
		require.NoError(t, err)
	}
	return out
}

func (b *bundle) envelopeJSON(t *testing.T, id int64) map[string]any {
	t.Helper()
	var m map[string]any
	err := b.pool.QueryRow(b.ctx, `SELECT to_jsonb(e) FROM envelope e WHERE id = $1`, id).Scan(&m)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil
	}
	require.NoError(t, err)
	return m
}

// deps lists the ids of the envelope's attempts, replays and conflicts.
func (b *bundle) deps(t *testing.T, id int64) string {
	t.Helper()
	var out []string
	for _, table := range []string{"envelope_attempt", "envelope_replay", "envelope_conflict"} {
		rows, err := b.pool.Query(b.ctx, `SELECT id FROM `+table+` WHERE envelope_id = $1 ORDER BY id`, id)
		require.NoError(t, err)
		ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
		require.NoError(t, err)
		out = append(out, fmt.Sprint(ids))
	}
	return strings.Join(out, " ")
}

func purge(t *testing.T, b *bundle, cfg retention.Config) retention.Report {
	t.Helper()
	rep, err := retention.Purge(b.ctx, b.worker, cfg)
	require.NoError(t, err)
	return rep
}

// counts is a report without its clock readings.
func counts(r retention.Report) retention.Report {
	r.Now, r.BodyCutoff, r.DeleteCutoff, r.DryRun = time.Time{}, time.Time{}, time.Time{}, false
	return r
}

// dropped sums the envelopes of the partitions rep dropped (or would), and
// fails unless every partition it names was dropped (or would be).
func dropped(t *testing.T, rep retention.Report, want string) int64 {
	t.Helper()
	var n int64
	for _, p := range rep.Partitions {
		require.Equal(t, want, p.Outcome, "partition %s", p.Name)
		n += p.Envelopes
	}
	return n
}

func TestPurgeDropsOldPartitionsAndBodiesOnlyWhereAllowed(t *testing.T) {
	t.Parallel()
	b := setup(t)

	untouched := map[string]int64{
		"failed 40 days ago":              b.seed(t, row{status: "failed", age: 40, attempts: 1}),
		"done 40 days ago, in the ledger": b.seed(t, row{status: "done", age: 40, ledger: true, attempts: 1}),
		"done 10 days ago":                b.seed(t, row{status: "done", age: 10, attempts: 1}),
		"ignored 29 days ago":             b.seed(t, row{status: "ignored", age: 29, attempts: 1}),
		"done 40 days ago, body purged":   b.seed(t, row{status: "done", age: 40, purged: true, attempts: 1}),
		"pending, received 2 days ago":    b.seed(t, row{status: "pending", age: 2, attempts: 3}),
	}
	bodyDropped := map[string]int64{
		"done 40 days ago":    b.seed(t, row{status: "done", age: 40, attempts: 2, replays: 1, conflicts: 1}),
		"ignored 31 days ago": b.seed(t, row{status: "ignored", age: 31, attempts: 1}),
		"done 89 days ago":    b.seed(t, row{status: "done", age: 89, attempts: 1}),
	}
	// Everything stored before the window goes with its partition: failed
	// ones too, and ones a ledger posting refers to (the posting stays).
	deleted := map[string]int64{
		"done 100 days ago":                b.seed(t, row{status: "done", age: 100, attempts: 2, replays: 2, conflicts: 1}),
		"ignored 91 days ago":              b.seed(t, row{status: "ignored", age: 91, attempts: 1}),
		"done 365 days ago, body purged":   b.seed(t, row{status: "done", age: 365, purged: true, attempts: 1, conflicts: 1}),
		"failed 100 days ago":              b.seed(t, row{status: "failed", age: 100, attempts: 1, conflicts: 1}),
		"done 100 days ago, in the ledger": b.seed(t, row{status: "done", age: 100, ledger: true, attempts: 1, replays: 1}),
	}
	ledgerID := deleted["done 100 days ago, in the ledger"]
	var source, deliveryID string
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT source, delivery_id FROM envelope WHERE id = $1`, ledgerID).Scan(&source, &deliveryID))
	before := b.snapshot(t)
	depsBefore := map[int64]string{}
	for _, id := range untouched {
		depsBefore[id] = b.deps(t, id)
	}
	keys := pgtest.Count(t, b.pool, `SELECT count(*) FROM envelope_key`)

	rep := purge(t, b, retention.Config{})

	require.Equal(t, int64(5), dropped(t, rep, envelope.PartitionDropped))
	require.Len(t, rep.Partitions, 3, "the days 365, 100 and 91 ago")
	require.Equal(t, retention.Report{BodiesDropped: 3, EnvelopesDeleted: 5, KeysSwept: 5, Batches: 1, Partitions: rep.Partitions}, counts(rep))
	require.False(t, rep.DryRun)
	require.WithinDuration(t, rep.Now.Add(-retention.DefaultBodyAfter), rep.BodyCutoff, 0)
	require.WithinDuration(t, rep.Now.Add(-retention.DefaultDeleteAfter), rep.DeleteCutoff, 0)
	require.Equal(t, keys-5, pgtest.Count(t, b.pool, `SELECT count(*) FROM envelope_key`))

	after := b.snapshot(t)
	for name, id := range untouched {
		key := fmt.Sprintf("envelope/%d", id)
		require.Equal(t, before[key], after[key], "%s: row changed", name)
		require.Equal(t, depsBefore[id], b.deps(t, id), "%s: dependent rows changed", name)
	}
	for name, id := range bodyDropped {
		was := map[string]any{}
		require.NoError(t, json.Unmarshal([]byte(before[fmt.Sprintf("envelope/%d", id)]), &was))
		now := b.envelopeJSON(t, id)
		require.NotNil(t, now, "%s: row deleted", name)
		require.Nil(t, now["body"], name)
		require.Nil(t, now["payload"], name)
		require.NotNil(t, now["body_purged_at"], name)
		require.Nil(t, was["body_purged_at"], name)
		// Everything else, the hash and the delivery id included, is kept.
		for _, col := range []string{"body", "payload", "body_purged_at"} {
			delete(was, col)
			delete(now, col)
		}
		require.Equal(t, was, now, "%s: tombstone lost a column", name)
	}
	for name, id := range deleted {
		require.Nil(t, b.envelopeJSON(t, id), "%s: not deleted", name)
		require.Equal(t, "[] [] []", b.deps(t, id), "%s: dependent rows left", name)
	}
	for k, v := range before {
		if strings.HasPrefix(k, "ledger_") {
			require.Equal(t, v, after[k], "ledger row %s changed", k)
		}
	}
	for k := range after {
		if strings.HasPrefix(k, "ledger_") {
			require.Contains(t, before, k, "ledger row %s appeared", k)
		}
	}
	// The posting still says which delivery made it.
	var auditSource, auditDelivery string
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT source, delivery_id FROM ledger_transaction_audit WHERE envelope_id = $1`, ledgerID).Scan(&auditSource, &auditDelivery))
	require.Equal(t, []string{source, deliveryID}, []string{auditSource, auditDelivery})
	require.Equal(t, 1, pgtest.Count(t, b.pool, `SELECT count(*) FROM ledger_payment_audit WHERE envelope_id = $1 AND delivery_id = $2`, ledgerID, deliveryID))
	// The partitions' own tables are gone, their rows kept as a record.
	for _, p := range rep.Partitions {
		require.Zero(t, pgtest.Count(t, b.pool, `SELECT count(*) FROM pg_class WHERE relname LIKE '%\_' || $1`, p.Name), "tables of partition %s left", p.Name)
		require.Equal(t, 1, pgtest.Count(t, b.pool, `SELECT count(*) FROM envelope_partition WHERE name = $1 AND dropped_at IS NOT NULL AND dropped_envelopes = $2`, p.Name, p.Envelopes))
	}

	// Safe to run again: nothing left to do.
	require.Equal(t, retention.Report{}, counts(purge(t, b, retention.Config{})))
}

// A partition past the window that still holds a pending envelope is kept,
// with every newer one (partitions go oldest first), and reported held;
// once the envelope is processed the next purge drops them.
func TestPurgeKeepsAPartitionWithPendingWork(t *testing.T) {
	t.Parallel()
	b := setup(t)
	pending := b.seed(t, row{status: "pending", age: 120})
	newer := b.seed(t, row{status: "done", age: 100})

	rep := purge(t, b, retention.Config{})
	require.Len(t, rep.Partitions, 1)
	require.Equal(t, envelope.PartitionHeld, rep.Partitions[0].Outcome)
	require.Equal(t, int64(1), rep.Partitions[0].Envelopes, "pending envelopes holding it")
	require.Zero(t, rep.EnvelopesDeleted)
	require.NotNil(t, b.envelopeJSON(t, pending))
	require.NotNil(t, b.envelopeJSON(t, newer))

	_, err := b.pool.Exec(b.ctx, `UPDATE envelope SET status = 'done', processed_at = now() WHERE id = $1`, pending)
	require.NoError(t, err)
	rep = purge(t, b, retention.Config{})
	require.Equal(t, int64(2), dropped(t, rep, envelope.PartitionDropped))
	require.Nil(t, b.envelopeJSON(t, pending))
	require.Nil(t, b.envelopeJSON(t, newer))
}

func TestPurgeWorksInBatches(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		rows    []row
		batch   int
		want    retention.Report
		wantAll bool
	}{
		{"five tombstones, keys swept 2 at a time", rep(5, row{status: "done", age: 100}), 2,
			retention.Report{EnvelopesDeleted: 5, KeysSwept: 5}, true},
		{"five bodies, batch of 2", rep(5, row{status: "ignored", age: 40}), 2,
			retention.Report{BodiesDropped: 5, Batches: 3}, true},
		{"four bodies, batch of 2", rep(4, row{status: "done", age: 40}), 2,
			retention.Report{BodiesDropped: 4, Batches: 2}, true},
		{"three of each, batch of 3", append(rep(3, row{status: "done", age: 100, attempts: 1}), rep(3, row{status: "done", age: 40})...), 3,
			retention.Report{EnvelopesDeleted: 3, KeysSwept: 3, BodiesDropped: 3, Batches: 1}, true},
		{"bodies of ledger envelopes are kept, not counted", append(rep(3, row{status: "done", age: 40, ledger: true}), rep(3, row{status: "done", age: 40})...), 2,
			retention.Report{BodiesDropped: 3, Batches: 2}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			for _, r := range tc.rows {
				b.seed(t, r)
			}
			got := counts(purge(t, b, retention.Config{BatchSize: tc.batch}))
			dropped(t, got, envelope.PartitionDropped)
			got.Partitions = nil
			require.Equal(t, tc.want, got)
			if tc.wantAll {
				require.Zero(t, pgtest.Count(t, b.pool, `SELECT count(*) FROM envelope_with_body WHERE body IS NOT NULL`))
			}
		})
	}
}

func rep(n int, r row) []row {
	out := make([]row, n)
	for i := range out {
		out[i] = r
	}
	return out
}

func TestPurgeDryRunChangesNothingAndPredictsTheRealRun(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, r := range []row{
		{status: "pending", age: 3},
		{status: "failed", age: 200, attempts: 2},
		{status: "done", age: 200, ledger: true, attempts: 1},
		{status: "done", age: 200, attempts: 3, replays: 1, conflicts: 2},
		{status: "ignored", age: 120, attempts: 1},
		{status: "done", age: 95, purged: true, attempts: 1},
		{status: "done", age: 60, attempts: 1, replays: 1},
		{status: "ignored", age: 45},
		{status: "done", age: 35, attempts: 1},
		{status: "done", age: 35, purged: true},
		{status: "done", age: 5},
	} {
		b.seed(t, r)
	}
	before := b.snapshot(t)

	dry := purge(t, b, retention.Config{BatchSize: 2, DryRun: true})
	require.True(t, dry.DryRun)
	require.Equal(t, before, b.snapshot(t), "a dry run changed rows")
	require.Equal(t, int64(5), dropped(t, dry, envelope.PartitionWouldDrop))
	require.Equal(t, retention.Report{EnvelopesDeleted: 5, BodiesDropped: 3, Batches: 2, Partitions: dry.Partitions}, counts(dry))

	real := purge(t, b, retention.Config{BatchSize: 2})
	require.False(t, real.DryRun)
	require.Equal(t, int64(5), dropped(t, real, envelope.PartitionDropped))
	require.Equal(t, retention.Report{EnvelopesDeleted: 5, KeysSwept: 5, BodiesDropped: 3, Batches: 2, Partitions: real.Partitions}, counts(real))
	require.Len(t, real.Partitions, len(dry.Partitions))
	for i := range real.Partitions {
		require.Equal(t, dry.Partitions[i].Name, real.Partitions[i].Name)
		require.Equal(t, dry.Partitions[i].Envelopes, real.Partitions[i].Envelopes)
	}
	require.NotEqual(t, before, b.snapshot(t))
}

// Dropping a partition needs its tables to itself for a moment: a
// transaction that holds one of its rows makes the drop give up after
// retention.LockWait (it does not queue ingest behind it), reported busy,
// and the next purge drops it.
func TestPurgeGivesUpOnABusyPartition(t *testing.T) {
	t.Parallel()
	b := setup(t)
	locked := b.seed(t, row{status: "done", age: 100})

	tx := pgtest.Tx(t, b.pool)
	_, err := tx.Exec(b.ctx, `SELECT 1 FROM envelope WHERE id = $1 FOR UPDATE`, locked)
	require.NoError(t, err)

	done := make(chan retention.Report, 1)
	go func() {
		r, err := retention.Purge(b.ctx, b.worker, retention.Config{})
		if err != nil {
			t.Error(err)
		}
		done <- r
	}()
	select {
	case r := <-done:
		require.Len(t, r.Partitions, 1)
		require.Equal(t, envelope.PartitionBusy, r.Partitions[0].Outcome)
		require.Zero(t, r.EnvelopesDeleted)
	case <-time.After(20 * time.Second):
		t.Fatal("purge waited for a locked partition instead of giving up")
	}
	require.NotNil(t, b.envelopeJSON(t, locked))

	require.NoError(t, tx.Rollback(b.ctx))
	require.Equal(t, int64(1), dropped(t, purge(t, b, retention.Config{}), envelope.PartitionDropped))
	require.Nil(t, b.envelopeJSON(t, locked))
}

func TestPurgeStopsWhenTheContextEnds(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id := b.seed(t, row{status: "done", age: 100})
	ctx, cancel := context.WithCancel(b.ctx)
	cancel()
	_, err := retention.Purge(ctx, b.pool, retention.Config{})
	require.ErrorIs(t, err, context.Canceled)
	require.NotNil(t, b.envelopeJSON(t, id))
}

func TestConfigDefaultsAndValidation(t *testing.T) {
	t.Parallel()
	got, err := retention.Config{}.WithDefaults()
	require.NoError(t, err)
	require.Equal(t, retention.Config{BodyAfter: 30 * 24 * time.Hour, DeleteAfter: 90 * 24 * time.Hour, BatchSize: 1000}, got)

	got, err = retention.Config{BodyAfter: time.Hour, DeleteAfter: time.Hour, BatchSize: 1, DryRun: true}.WithDefaults()
	require.NoError(t, err)
	require.Equal(t, retention.Config{BodyAfter: time.Hour, DeleteAfter: time.Hour, BatchSize: 1, DryRun: true}, got)

	for _, tc := range []struct {
		cfg  retention.Config
		want string
	}{
		{retention.Config{BodyAfter: -time.Hour}, "body-after -1h must be positive"},
		{retention.Config{DeleteAfter: -time.Hour}, "delete-after -1h must be positive"},
		{retention.Config{BatchSize: -1}, "batch size -1 must be positive"},
		{retention.Config{BodyAfter: 48 * time.Hour, DeleteAfter: 24 * time.Hour}, "delete-after 1d is shorter than body-after 2d"},
		{retention.Config{BodyAfter: 100 * 24 * time.Hour}, "delete-after 90d is shorter than body-after 100d"},
	} {
		_, err := tc.cfg.WithDefaults()
		require.ErrorIs(t, err, retention.ErrInvalidConfig, "%+v", tc.cfg)
		require.ErrorContains(t, err, tc.want)
	}
	// Purge refuses before touching the database.
	_, err = retention.Purge(context.Background(), nil, retention.Config{BatchSize: -5})
	require.ErrorIs(t, err, retention.ErrInvalidConfig)
}

// A tombstone keeps the delivery id and the body's hash, so a redelivery of
// a GitHub or Shopify delivery (no signed timestamp: the id is their only
// replay defence) is still caught after its body is gone.
func TestTombstoneStillBlocksARedeliveredID(t *testing.T) {
	t.Parallel()
	b := setup(t)
	rc, err := envelope.NewInsertClient(b.pool, slog.New(slog.NewTextHandler(io.Discard, nil)))
	require.NoError(t, err)
	store := envelope.NewStore(b.pool, rc)
	body := []byte(`{"ref":"refs/heads/main","repository":{"full_name":"octo/repo"},"commits":[]}`)
	delivery := envelope.NewDelivery{
		Source: "gh", Provider: "github", DeliveryID: "72d3162e-cc78-11e3-81ab-4c9367dc0958", EventType: "push",
		Body: body, Payload: body, Headers: map[string]string{"X-GitHub-Event": "push"},
	}
	first, err := store.Insert(b.ctx, delivery)
	require.NoError(t, err)
	require.False(t, first.Duplicate)
	// Stored and processed 40 days ago (as the worker would have), then
	// its day's bodies dropped.
	_, err = b.pool.Exec(b.ctx, `
		UPDATE envelope SET status = 'done', attempts = 1, processed_at = now() - interval '40 days' WHERE id = $1`, first.EnvelopeID)
	require.NoError(t, err)
	id := envelopetest.MoveTo(t, b.pool, first.EnvelopeID, time.Now().Add(-40*24*time.Hour))
	bodies := counts(purge(t, b, retention.Config{}))
	require.Len(t, bodies.BodyPartitions, 1)
	require.Equal(t, envelope.PartitionDropped, bodies.BodyPartitions[0].Outcome)
	require.Equal(t, int64(1), bodies.BodyPartitions[0].Envelopes)
	require.Zero(t, bodies.BodiesDropped, "no row rewritten")
	require.Nil(t, b.envelopeJSON(t, id)["body"])
	tomb, err := envelope.LoadDetail(b.ctx, b.pool, id, false)
	require.NoError(t, err)
	require.Nil(t, tomb.Body)
	require.NotNil(t, tomb.BodyPurgedAt)
	jobs := pgtest.Count(t, b.pool, `SELECT count(*) FROM river_job`)

	again, err := store.Insert(b.ctx, delivery)
	require.NoError(t, err)
	require.Equal(t, envelope.InsertResult{EnvelopeID: id, Duplicate: true}, again)
	require.Equal(t, jobs, pgtest.Count(t, b.pool, `SELECT count(*) FROM river_job`), "a redelivery enqueued a job")
	require.Equal(t, 1, pgtest.Count(t, b.pool, `SELECT count(*) FROM envelope_duplicate WHERE envelope_id = $1`, id))

	other := delivery
	other.Body = []byte(`{"ref":"refs/heads/evil","repository":{"full_name":"octo/repo"},"commits":[]}`)
	other.Payload = other.Body
	_, err = store.Insert(b.ctx, other)
	var conflict *envelope.ConflictError
	require.ErrorAs(t, err, &conflict)
	require.Equal(t, id, conflict.EnvelopeID)
	require.Equal(t, jobs, pgtest.Count(t, b.pool, `SELECT count(*) FROM river_job`))
	require.Equal(t, 1, pgtest.Count(t, b.pool, `SELECT count(*) FROM envelope`))
	require.Equal(t, 1, pgtest.Count(t, b.pool, `SELECT count(*) FROM envelope_conflict WHERE envelope_id = $1`, id))
	require.Nil(t, b.envelopeJSON(t, id)["body"], "the conflict restored a body")

	// Once the tombstone window is over too, the id is forgotten: its
	// partition is dropped, and the key, left behind, is taken over by the
	// next delivery of the id (before the sweep deletes it, and after).
	at := time.Now().Add(-91 * 24 * time.Hour) // one instant: its day is the partition's
	moved := envelopetest.MoveTo(t, b.pool, id, at)
	day := "envelope_body_" + at.UTC().Format("20060102")
	require.Equal(t, 1, pgtest.Count(t, b.pool, `SELECT count(*) FROM pg_class WHERE relname = $1`, day), "its body partition, made with the day")
	rep := purge(t, b, retention.Config{})
	require.Equal(t, int64(1), dropped(t, rep, envelope.PartitionDropped))
	require.Zero(t, pgtest.Count(t, b.pool, `SELECT count(*) FROM pg_class WHERE relname = $1`, day), "the body partition goes with the day")
	require.Equal(t, int64(1), rep.KeysSwept)
	fresh, err := store.Insert(b.ctx, delivery)
	require.NoError(t, err)
	require.False(t, fresh.Duplicate)
	require.NotEqual(t, moved, fresh.EnvelopeID)

	other.DeliveryID = "8f0e5c2a-cc78-11e3-81ab-4c9367dc0958"
	kept, err := store.Insert(b.ctx, other)
	require.NoError(t, err)
	keptID := envelopetest.MoveTo(t, b.pool, kept.EnvelopeID, time.Now().Add(-92*24*time.Hour))
	_, err = b.pool.Exec(b.ctx, `UPDATE envelope SET status = 'done', processed_at = now() WHERE id = $1`, keptID)
	require.NoError(t, err)
	_, err = b.pool.Exec(b.ctx, `SELECT envelope_partition_drop(name, now() - interval '90 days') FROM envelope_partition WHERE dropped_at IS NULL ORDER BY upper_id LIMIT 1`)
	require.NoError(t, err)
	require.Equal(t, 1, pgtest.Count(t, b.pool, `SELECT count(*) FROM envelope_key WHERE delivery_id = $1`, other.DeliveryID), "the key is not swept yet")
	again, err = store.Insert(b.ctx, other)
	require.NoError(t, err)
	require.False(t, again.Duplicate, "a key whose partition was dropped still blocked its id")
	require.Equal(t, again.EnvelopeID, int64(pgtest.Count(t, b.pool, `SELECT envelope_id FROM envelope_key WHERE delivery_id = $1`, other.DeliveryID)))
}

// startClient runs a River client with only the purge worker registered.
func startClient(t *testing.T, b *bundle, cfg *river.Config) *river.Client[pgx.Tx] {
	t.Helper()
	workers := river.NewWorkers()
	require.NoError(t, river.AddWorkerSafely(workers, &retention.PurgeWorker{Pool: b.pool, JobTimeout: 30 * time.Second}))
	cfg.Queues = map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 2}}
	cfg.Workers = workers
	cfg.FetchCooldown = 5 * time.Millisecond
	cfg.FetchPollInterval = 20 * time.Millisecond
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	client, err := river.NewClient(riverpgxv5.New(b.pool), cfg)
	require.NoError(t, err)
	require.NoError(t, client.Start(b.ctx))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = client.Stop(ctx)
	})
	return client
}

// waitJob waits for the purge job id to finish and returns its state and
// recorded output.
func (b *bundle) waitJob(t *testing.T, id int64) (string, retention.Report) {
	t.Helper()
	var state string
	var output []byte
	pgtest.Eventually(t, 20*time.Second, fmt.Sprintf("purge job %d to finish", id), func() (bool, string) {
		err := b.pool.QueryRow(b.ctx, `SELECT state::text, metadata->'output' FROM river_job WHERE id = $1`, id).Scan(&state, &output)
		require.NoError(t, err)
		switch state {
		case "completed", "cancelled", "discarded":
			return true, ""
		}
		return false, fmt.Sprintf("purge job %d still %s", id, state)
	})
	var rep retention.Report
	if len(output) > 0 && string(output) != "null" {
		require.NoError(t, json.Unmarshal(output, &rep))
	}
	return state, rep
}

func TestPurgeWorkerRunsAsARiverJob(t *testing.T) {
	t.Parallel()
	b := setup(t)
	old := b.seed(t, row{status: "done", age: 100, attempts: 1})
	stale := b.seed(t, row{status: "ignored", age: 40})
	kept := b.seed(t, row{status: "failed", age: 40})
	client := startClient(t, b, &river.Config{})

	res, err := client.Insert(b.ctx, retention.PurgeArgs{BatchSize: 1}, nil)
	require.NoError(t, err)
	state, rep := b.waitJob(t, res.Job.ID)
	require.Equal(t, "completed", state)
	require.Equal(t, int64(1), dropped(t, rep, envelope.PartitionDropped))
	require.Equal(t, retention.Report{EnvelopesDeleted: 1, KeysSwept: 1, BodiesDropped: 1, Batches: 1, Partitions: rep.Partitions}, counts(rep))
	require.Nil(t, b.envelopeJSON(t, old))
	require.NotNil(t, b.envelopeJSON(t, stale)["body_purged_at"])
	require.NotNil(t, b.envelopeJSON(t, kept)["body"])

	// A bad configuration is cancelled, not retried.
	res, err = client.Insert(b.ctx, retention.PurgeArgs{BodyAfter: 48 * time.Hour, DeleteAfter: time.Hour}, nil)
	require.NoError(t, err)
	state, _ = b.waitJob(t, res.Job.ID)
	require.Equal(t, "cancelled", state)
}

func TestPurgePeriodicJobRunsOnStart(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id := b.seed(t, row{status: "done", age: 40})
	startClient(t, b, &river.Config{
		PeriodicJobs: []*river.PeriodicJob{retention.PeriodicJob(time.Hour, retention.PurgeArgs{BatchSize: 10})},
	})
	var jobID int64
	pgtest.EventuallyEvery(t, 30*time.Second, 20*time.Millisecond, "a purge job inserted on start", func() (bool, string) {
		err := b.pool.QueryRow(b.ctx, `SELECT id FROM river_job WHERE kind = 'purge_envelopes'`).Scan(&jobID)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			require.NoError(t, err)
		}
		return jobID != 0, "no purge job was inserted on start"
	})
	state, rep := b.waitJob(t, jobID)
	require.Equal(t, "completed", state)
	require.Equal(t, int64(1), rep.BodiesDropped)
	require.NotNil(t, b.envelopeJSON(t, id)["body_purged_at"])
	require.Equal(t, 10, pgtest.Count(t, b.pool, `SELECT (args->>'batch_size')::int FROM river_job WHERE id = $1`, jobID))
}

func TestPurgeArgsAreUniqueWhileOneIsLive(t *testing.T) {
	t.Parallel()
	b := setup(t)
	client, err := river.NewClient(riverpgxv5.New(b.pool), &river.Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	require.NoError(t, err)
	first, err := client.Insert(b.ctx, retention.PurgeArgs{}, nil)
	require.NoError(t, err)
	second, err := client.Insert(b.ctx, retention.PurgeArgs{DryRun: true}, nil)
	require.NoError(t, err)
	require.True(t, second.UniqueSkippedAsDuplicate)
	require.Equal(t, first.Job.ID, second.Job.ID)
	require.Equal(t, "purge_envelopes", first.Job.Kind)
}
