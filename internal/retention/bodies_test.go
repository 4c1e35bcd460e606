package retention_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/inboxhq/inbox/internal/envelope"
	"github.com/inboxhq/inbox/internal/envelope/envelopetest"
	"github.com/inboxhq/inbox/internal/pgtest"
	"github.com/inboxhq/inbox/internal/retention"
)

// Bodies stored through ingest's insert live in envelope_body and go a
// partition at a time once the partition ended before the body window
// (migration 00200): no row of envelope is rewritten. A partition with a
// pending envelope is held. A failed envelope keeps the copy the worker put
// in its row, so it can still be replayed; the done and ignored ones lose
// theirs (their row, its digest and the delivery id stay until the
// tombstone window). A dry run says what would go and changes nothing.
func TestPurgeDropsBodiesAPartitionAtATime(t *testing.T) {
	t.Parallel()
	b := setup(t)
	rc, err := envelope.NewInsertClient(b.pool, slog.New(slog.NewTextHandler(io.Discard, nil)))
	require.NoError(t, err)
	store := envelope.NewStoreWith(b.pool, rc, envelope.StoreOptions{})
	body := func(i int) string {
		return fmt.Sprintf(`{"type":"payment.succeeded","data":{"payment_id":"pay_%d"}}`, i)
	}
	ids := make([]int64, 5)
	for i := range ids {
		res, err := store.Insert(b.ctx, envelope.NewDelivery{Source: "src", Provider: "github", DeliveryID: fmt.Sprintf("bodies-%d", i),
			EventType: "push", Body: []byte(body(i)), Payload: []byte(body(i)), Headers: map[string]string{"X-GitHub-Event": "push"}})
		require.NoError(t, err)
		ids[i] = res.EnvelopeID
	}
	finish := func(id int64, st envelope.Status) {
		t.Helper()
		out := envelope.OutcomeDone
		if st == envelope.StatusFailed {
			out = envelope.OutcomeFailed
		}
		require.NoError(t, pgx.BeginFunc(b.ctx, b.pool, func(tx pgx.Tx) error {
			_, err := envelope.FinishMany(b.ctx, tx, "w", []envelope.Record{{EnvelopeID: id, Status: st, Result: json.RawMessage(`{}`),
				Attempt: envelope.Attempt{Attempt: 1, Outcome: out, Error: "permanent: x", StartedAt: time.Now()}}})
			return err
		}))
	}
	done, failed, done2, pending, bare := ids[0], ids[1], ids[2], ids[3], ids[4]
	finish(done, envelope.StatusDone)
	finish(failed, envelope.StatusFailed)
	finish(done2, envelope.StatusDone)
	// Failed by hand, without the worker's copy: the drop makes one.
	_, err = b.pool.Exec(b.ctx, `UPDATE envelope SET status = 'failed', processed_at = now() WHERE id = $1`, bare)
	require.NoError(t, err)
	// Stored 40 days ago, in that day's partitions (envelope and envelope_body).
	at := time.Now().Add(-40 * 24 * time.Hour)
	for i, id := range ids {
		ids[i] = envelopetest.MoveTo(t, b.pool, id, at)
	}
	done, failed, done2, pending, bare = ids[0], ids[1], ids[2], ids[3], ids[4]
	day := at.UTC().Format("20060102")
	bodyPartition := func() bool {
		return pgtest.Count(t, b.pool, `SELECT count(*) FROM pg_class WHERE relname = $1`, "envelope_body_"+day) == 1
	}
	bodyOf := func(id int64) []byte {
		t.Helper()
		e, err := envelope.Get(b.ctx, b.pool, id)
		require.NoError(t, err)
		return e.Body
	}
	require.True(t, bodyPartition())

	rep := purge(t, b, retention.Config{DryRun: true})
	require.Equal(t, []envelope.PartitionDrop{{Name: day, UpperAt: rep.BodyPartitions[0].UpperAt, Outcome: envelope.PartitionHeld, Envelopes: 1}}, rep.BodyPartitions)
	rep = purge(t, b, retention.Config{})
	require.Len(t, rep.BodyPartitions, 1)
	require.Equal(t, envelope.PartitionHeld, rep.BodyPartitions[0].Outcome, "a pending envelope holds its body")
	require.True(t, bodyPartition())
	require.Equal(t, body(0), string(bodyOf(done)))

	finish(pending, envelope.StatusDone)
	rep = purge(t, b, retention.Config{DryRun: true})
	require.Equal(t, envelope.PartitionWouldDrop, rep.BodyPartitions[0].Outcome)
	require.Equal(t, int64(3), rep.BodyPartitions[0].Envelopes, "three done")
	require.True(t, bodyPartition(), "a dry run changes nothing")
	rep = purge(t, b, retention.Config{})
	require.Equal(t, []envelope.PartitionDrop{{Name: day, UpperAt: rep.BodyPartitions[0].UpperAt, Outcome: envelope.PartitionDropped, Envelopes: 3}}, rep.BodyPartitions)
	require.Zero(t, rep.BodiesDropped, "no row rewritten")
	require.False(t, bodyPartition())

	for _, id := range []int64{done, done2, pending} {
		require.Nil(t, bodyOf(id))
		d, err := envelope.LoadDetail(b.ctx, b.pool, id, false)
		require.NoError(t, err)
		require.NotNil(t, d.BodyPurgedAt, "when its body partition went")
	}
	purged, err := envelope.Purged(b.ctx, b.pool, ids)
	require.NoError(t, err)
	require.Equal(t, []int64{done, done2, pending}, purged)
	require.Equal(t, body(1), string(bodyOf(failed)), "the failed envelope's copy")
	require.Equal(t, body(4), string(bodyOf(bare)), "the copy the drop made")
	d, err := envelope.LoadDetail(b.ctx, b.pool, failed, false)
	require.NoError(t, err)
	require.Nil(t, d.BodyPurgedAt)
	require.Equal(t, 5, pgtest.Count(t, b.pool, `SELECT count(*) FROM envelope WHERE id = ANY($1)`, ids), "the rows stay")
	require.Equal(t, 2, pgtest.Count(t, b.pool, `
		SELECT count(*) FROM envelope_with_body WHERE id = ANY($1) AND body IS NOT NULL`, ids))

	rep = purge(t, b, retention.Config{})
	require.Empty(t, rep.BodyPartitions, "nothing left to drop")
}

// A day's bodies drop while ingest stores deliveries, a worker locks and
// finishes them, and a reader reads an envelope with a plan over every
// partition, each in its short transactions, as in production: the drop
// takes the body table before anything else, so it waits for those
// transactions (never past its lock wait) and none of them deadlocks with
// it. Every loop runs without an error throughout.
func TestBodyDropUnderIngestAndWorkerTraffic(t *testing.T) {
	t.Parallel()
	dropUnderTraffic(t, 40*24*time.Hour, func(rep retention.Report) []envelope.PartitionDrop { return rep.BodyPartitions })
}

// A reader holds the body table when a day's bodies drop (any statement over
// it locks the parent first; LOCK TABLE here locks every partition too):
// the drop's first wait is at the body table, before it holds anything of
// the day, so a reader that goes on to the day's tables never finds the drop
// holding them while the drop waits for it (the deadlock of the old order).
// The reader then reads the day's bodies at once and commits, and the drop
// follows on its first attempt. A drop that locks the day's tables first
// waits at the day's table instead, and fails here. The traffic test above
// cannot tell: the worker's statements lock only their ids' partitions.
func TestBodyDropWaitsForAReaderOfTheDay(t *testing.T) {
	t.Parallel()
	b := setup(t)
	old := envelopetest.Insert(t, b.pool, envelopetest.Row{Status: "done", ReceivedAt: time.Now().Add(-40 * 24 * time.Hour)})
	envelopetest.MoveBodies(t, b.pool)
	day := pgtest.Scalar[string](t, b.pool, `SELECT tableoid::regclass::text FROM envelope_body WHERE id = $1`, old)

	reader, err := b.pool.Begin(b.ctx)
	require.NoError(t, err)
	defer func() { _ = reader.Rollback(b.ctx) }()
	_, err = reader.Exec(b.ctx, `LOCK TABLE envelope_body IN ACCESS SHARE MODE`)
	require.NoError(t, err)

	// The drop as the purge runs it, with a lock wait long enough that a
	// slow machine cannot make the correct drop give up; a deadlock is
	// still found within deadlock_timeout (1 s).
	type result struct {
		drops []envelope.PartitionDrop
		err   error
	}
	done := make(chan result, 1)
	go func() {
		drops, err := envelope.DropBodyPartitions(b.ctx, b.worker, time.Now().Add(-30*24*time.Hour), time.Time{}, 10*time.Second, false)
		done <- result{drops, err}
	}()
	pgtest.Eventually(t, 10*time.Second, "the drop waits for the body table", func() (bool, string) {
		return pgtest.Count(t, b.pool, `
			SELECT count(*) FROM `+pgtest.Locks+` l
			 WHERE relation = 'envelope_body'::regclass AND mode = 'AccessExclusiveLock' AND NOT granted`) == 1, ""
	})
	start := time.Now()
	require.Equal(t, 1, pgtest.Count(t, reader, `SELECT count(*) FROM `+day))
	require.Less(t, time.Since(start), 250*time.Millisecond, "the day's bodies were not locked by the drop")
	require.NoError(t, reader.Commit(b.ctx))

	r := <-done
	require.NoError(t, r.err)
	require.Len(t, r.drops, 1)
	require.Equal(t, envelope.PartitionDropped, r.drops[0].Outcome, "dropped on its first attempt")
}

// A day's partitions (past the tombstone window) drop under the same
// traffic: the drop takes the parents, envelope first, before the day's
// partition, so it waits for the transactions in flight (never past its
// lock wait) and none deadlocks with it.
func TestPartitionDropUnderIngestAndWorkerTraffic(t *testing.T) {
	t.Parallel()
	dropUnderTraffic(t, 100*24*time.Hour, func(rep retention.Report) []envelope.PartitionDrop { return rep.Partitions })
}

// dropUnderTraffic stores an envelope age ago, runs ingest, two workers and
// a reader, and purges (up to three times: a busy drop is retried by the next purge)
// until the drop that drops reports it dropped.
func dropUnderTraffic(t *testing.T, age time.Duration, drops func(retention.Report) []envelope.PartitionDrop) {
	b := setup(t)
	rc, err := envelope.NewInsertClient(b.pool, slog.New(slog.NewTextHandler(io.Discard, nil)))
	require.NoError(t, err)
	store := envelope.NewStoreWith(b.pool, rc, envelope.StoreOptions{})
	delivery := func(id string) envelope.NewDelivery {
		body := []byte(`{"type":"payment.succeeded","data":{"payment_id":"` + id + `"}}`)
		return envelope.NewDelivery{Source: "src", Provider: "github", DeliveryID: id, EventType: "push",
			Body: body, Payload: body, Headers: map[string]string{"X-GitHub-Event": "push"}}
	}
	finish := func(ctx context.Context, tx pgx.Tx, id int64) error {
		_, err := envelope.FinishMany(ctx, tx, "w", []envelope.Record{{EnvelopeID: id, Status: envelope.StatusDone, Result: json.RawMessage(`{}`),
			Attempt: envelope.Attempt{Attempt: 1, Outcome: envelope.OutcomeDone, StartedAt: time.Now()}}})
		return err
	}
	res, err := store.Insert(b.ctx, delivery("old"))
	require.NoError(t, err)
	require.NoError(t, pgx.BeginFunc(b.ctx, b.pool, func(tx pgx.Tx) error { return finish(b.ctx, tx, res.EnvelopeID) }))
	old := envelopetest.MoveTo(t, b.pool, res.EnvelopeID, time.Now().Add(-age))

	ctx, cancel := context.WithCancel(b.ctx)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	stored := make(chan int64, 10000)
	var finished atomic.Int64
	wg.Add(4)
	go func() { // ingest
		defer wg.Done()
		for i := 0; ctx.Err() == nil; i++ {
			r, err := store.Insert(ctx, delivery(fmt.Sprintf("live-%d", i)))
			if err != nil {
				if ctx.Err() == nil {
					errs <- fmt.Errorf("ingest: %w", err)
				}
				return
			}
			stored <- r.EnvelopeID
		}
	}()
	work := func() { // a worker: lock, work a moment (the handler), finish
		defer wg.Done()
		for {
			var id int64
			select {
			case <-ctx.Done():
				return
			case id = <-stored:
			}
			err := pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
				if _, _, err := envelope.LockMany(ctx, tx, []int64{id}, false); err != nil {
					return err
				}
				time.Sleep(20 * time.Millisecond)
				return finish(ctx, tx, id)
			})
			if err != nil {
				if ctx.Err() == nil {
					errs <- fmt.Errorf("worker: %w", err)
				}
				return
			}
			finished.Add(1)
		}
	}
	go work()
	go work()
	// A reader whose plan covers every partition of envelope and
	// envelope_body: a generic plan, as a prepared statement of the console
	// or the CLI may keep. The worker's statements are planned for their
	// ids and lock only the partitions that hold them, so without it
	// nothing in flight holds the old day's partitions.
	reader, err := pgx.ConnectConfig(b.ctx, b.pool.Config().ConnConfig.Copy())
	require.NoError(t, err)
	defer reader.Close(context.Background())
	_, err = reader.Exec(b.ctx, `SET plan_cache_mode = force_generic_plan`)
	require.NoError(t, err)
	go func() {
		defer wg.Done()
		for ctx.Err() == nil {
			err := pgx.BeginFunc(ctx, reader, func(tx pgx.Tx) error {
				_, err := envelope.Get(ctx, tx, old)
				if errors.Is(err, envelope.ErrNotFound) {
					err = nil // its day dropped
				}
				return err
			})
			if err != nil {
				if ctx.Err() == nil {
					errs <- fmt.Errorf("reader: %w", err)
				}
				return
			}
			time.Sleep(2 * time.Millisecond)
		}
	}()
	pgtest.Eventually(t, 10*time.Second, "traffic flows", func() (bool, string) { return finished.Load() >= 20, "" })

	var outcomes []string
	for range 3 { // a busy drop is retried by the next purge
		got := drops(purge(t, b, retention.Config{}))
		require.Len(t, got, 1)
		outcomes = append(outcomes, got[0].Outcome)
		if got[0].Outcome == envelope.PartitionDropped {
			break
		}
	}
	before := finished.Load()
	pgtest.Eventually(t, 10*time.Second, "traffic still flows after the drop", func() (bool, string) { return finished.Load() >= before+20, "" })
	cancel()
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	require.Equal(t, envelope.PartitionDropped, outcomes[len(outcomes)-1], "outcomes %v", outcomes)
	if e, err := envelope.Get(b.ctx, b.pool, old); err == nil {
		require.Nil(t, e.Body, "the old day's body went")
	} else {
		require.ErrorIs(t, err, envelope.ErrNotFound, "the old day went")
	}
}
