package envelope_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/inboxhq/inbox/internal/envelope"
	"github.com/inboxhq/inbox/internal/envelope/envelopetest"
	"github.com/inboxhq/inbox/internal/pg"
	"github.com/inboxhq/inbox/internal/pgtest"
)

// scanned counts what CountBySource(repeats) must say, the slow way: a
// scan of the tables themselves.
func scanned(t *testing.T, q pg.Querier) []envelope.SourceCounts {
	t.Helper()
	rows, err := q.Query(context.Background(), `
		WITH e AS (
			SELECT source,
			       count(*) FILTER (WHERE status = 'pending') AS pending,
			       count(*) FILTER (WHERE status = 'done')    AS done,
			       count(*) FILTER (WHERE status = 'failed')  AS failed,
			       count(*) FILTER (WHERE status = 'ignored') AS ignored,
			       count(*)                                   AS total
			  FROM envelope GROUP BY source
		), d AS (
			SELECT e.source, count(*) AS duplicates FROM envelope_duplicate x JOIN envelope e ON e.id = x.envelope_id GROUP BY e.source
		), c AS (
			SELECT source, sum(repeats) AS conflicts FROM envelope_conflict GROUP BY source
		)
		SELECT coalesce(e.source, c.source), coalesce(pending, 0), coalesce(done, 0), coalesce(failed, 0),
		       coalesce(ignored, 0), coalesce(total, 0), coalesce(duplicates, 0), coalesce(conflicts, 0)
		  FROM e LEFT JOIN d ON d.source = e.source FULL JOIN c ON c.source = e.source
		 ORDER BY 1`)
	require.NoError(t, err)
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (envelope.SourceCounts, error) {
		var c envelope.SourceCounts
		err := r.Scan(&c.Source, &c.Pending, &c.Done, &c.Failed, &c.Ignored, &c.Total, &c.Duplicates, &c.Conflicts)
		return c, err
	})
	require.NoError(t, err)
	if out == nil {
		out = []envelope.SourceCounts{}
	}
	return out
}

func counted(t *testing.T, q pg.Querier) []envelope.SourceCounts {
	t.Helper()
	got, err := envelope.CountBySource(context.Background(), q, true)
	require.NoError(t, err)
	if got == nil {
		got = []envelope.SourceCounts{}
	}
	return got
}

// requireCountsMatchAScan checks the counters against a scan in one
// snapshot.
func requireCountsMatchAScan(t *testing.T, pool *pgxpool.Pool, after string) {
	t.Helper()
	tx, err := pool.BeginTx(context.Background(), pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	require.NoError(t, err)
	defer tx.Rollback(context.Background()) //nolint:errcheck
	want := scanned(t, tx)
	require.NotEmpty(t, want, after)
	require.Equal(t, want, counted(t, tx), "counters after %s", after)
	// Failures by cause (migration 00191), with the newest of each.
	rows, err := tx.Query(context.Background(), `
		SELECT coalesce(last_cause, ''), count(*), max(id), (array_agg(coalesce(last_error, '') ORDER BY id DESC))[1]
		  FROM envelope WHERE status = 'failed' GROUP BY 1 ORDER BY 2 DESC, 1`)
	require.NoError(t, err)
	wantCauses, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (envelope.FailureCause, error) {
		var f envelope.FailureCause
		return f, r.Scan(&f.Cause, &f.Count, &f.LatestID, &f.LatestError)
	})
	require.NoError(t, err)
	gotCauses, err := envelope.FailureCauses(context.Background(), tx, "", 100)
	require.NoError(t, err)
	require.Equal(t, wantCauses, gotCauses, "failures by cause after %s", after)
}

// The counters equal a scan after every path that changes envelopes, each
// under the role that takes it: ingest's inserts, duplicates and conflicts
// (group commit), a rolled-back transaction, the worker's status changes,
// a replay back to pending, retention's deletes, and compaction between
// and after them. No role is granted a write on envelope_count: the
// triggers write it.
func TestEnvelopeCountsEqualAScanAfterEveryPath(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.NewURL(t)
	owner := pgtest.OpenPool(t, url)
	ingestPool := pgtest.OpenPool(t, pgtest.RoleURL(t, url, pgtest.RoleIngest))
	workerPool := pgtest.OpenPool(t, pgtest.RoleURL(t, url, pgtest.RoleWorker))
	rc, err := envelope.NewInsertClient(ingestPool, slog.New(slog.NewTextHandler(io.Discard, nil)))
	require.NoError(t, err)
	store := envelope.NewStore(ingestPool, rc)

	insert := func(source, id, body string) envelope.InsertResult {
		d := ghDelivery(id, body)
		d.Source = source
		res, err := store.Insert(ctx, d)
		var conflict *envelope.ConflictError
		if err != nil {
			require.ErrorAs(t, err, &conflict)
		}
		return res
	}
	var wg sync.WaitGroup
	for i := range 40 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			src := []string{"alpha", "beta", "gamma"}[i%3]
			insert(src, fmt.Sprintf("d-%d", i), fmt.Sprintf(`{"n":%d}`, i))
			if i%5 == 0 {
				insert(src, fmt.Sprintf("d-%d", i), fmt.Sprintf(`{"n":%d}`, i)) // duplicate
			}
			if i%7 == 0 {
				insert(src, fmt.Sprintf("d-%d", i), `{"other":true}`) // conflict
			}
			if i%14 == 0 {
				insert(src, fmt.Sprintf("d-%d", i), `{"other":true}`) // the same variant again: counted on its row
			}
		}()
	}
	wg.Wait()
	requireCountsMatchAScan(t, owner, "concurrent ingest with duplicates and conflicts")
	require.Equal(t, 40, pgtest.Count(t, owner, `SELECT sum(n) FROM envelope_count WHERE kind = 'pending'`))

	// A transaction that rolls back leaves no delta.
	tx, err := workerPool.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, `UPDATE envelope SET status = 'done', processed_at = now() WHERE source = 'alpha'`)
	require.NoError(t, err)
	require.NoError(t, tx.Rollback(ctx))
	requireCountsMatchAScan(t, owner, "a rolled-back update")

	// The worker's transitions, in statements of many rows and of one.
	_, err = workerPool.Exec(ctx, `UPDATE envelope SET status = 'done', processed_at = now() WHERE source = 'alpha' AND id % 2 = 0`)
	require.NoError(t, err)
	_, err = workerPool.Exec(ctx, `UPDATE envelope SET status = 'failed', processed_at = now(), last_error = 'unknown currency ' || id,
		last_cause = CASE WHEN id % 2 = 0 THEN 'unknown_currency' END WHERE source = 'beta' AND id % 3 = 0`)
	require.NoError(t, err)
	_, err = workerPool.Exec(ctx, `UPDATE envelope SET status = 'ignored', processed_at = now() WHERE id = (SELECT min(id) FROM envelope WHERE source = 'gamma')`)
	require.NoError(t, err)
	_, err = workerPool.Exec(ctx, `UPDATE envelope SET attempts = attempts + 1 WHERE source = 'gamma'`) // no status change: no delta
	require.NoError(t, err)
	requireCountsMatchAScan(t, owner, "status changes")

	folded, err := envelope.CompactCounts(ctx, workerPool)
	require.NoError(t, err)
	require.Positive(t, folded)
	requireCountsMatchAScan(t, owner, "a compaction")
	require.LessOrEqual(t, pgtest.Count(t, owner, `SELECT count(*) FROM envelope_count`), 3*6, "one row per source and kind once compacted")

	// A replay puts failed envelopes back to pending; retention drops the
	// partition of done ones, with their duplicates, and their counts.
	_, err = owner.Exec(ctx, `UPDATE envelope SET status = 'pending', processed_at = NULL WHERE status = 'failed'`)
	require.NoError(t, err)
	rows, err := owner.Query(ctx, `SELECT id FROM envelope e WHERE status = 'done' AND NOT EXISTS (SELECT 1 FROM envelope_duplicate d WHERE d.envelope_id = e.id)`)
	require.NoError(t, err)
	done, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	require.NoError(t, err)
	require.NotEmpty(t, done)
	at := time.Now().Add(-100 * 24 * time.Hour) // one instant, one partition, though the loop crosses midnight
	for _, id := range done {
		envelopetest.MoveTo(t, owner, id, at)
	}
	requireCountsMatchAScan(t, owner, "envelopes moving partitions")
	drops, err := envelope.DropPartitions(ctx, workerPool, time.Now().Add(-90*24*time.Hour), time.Second, false)
	require.NoError(t, err)
	require.Len(t, drops, 1)
	require.Equal(t, envelope.PartitionDrop{Name: drops[0].Name, UpperAt: drops[0].UpperAt, Outcome: envelope.PartitionDropped, Envelopes: int64(len(done))}, drops[0])
	requireCountsMatchAScan(t, owner, "a replay and a partition dropped")

	_, err = envelope.CompactCounts(ctx, workerPool)
	require.NoError(t, err)
	requireCountsMatchAScan(t, owner, "a second compaction")
}

// Compactions running while ingest writes never lose or double a delta:
// the counts equal a scan at the end, whatever interleaving happened.
func TestCompactionConcurrentWithWritersKeepsCountsExact(t *testing.T) {
	t.Parallel()
	b := setupStore(t, envelope.StoreOptions{})
	ctx := context.Background()
	stop := make(chan struct{})
	var compactions sync.WaitGroup
	for range 2 {
		compactions.Add(1)
		go func() {
			defer compactions.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				_, err := envelope.CompactCounts(ctx, b.pool)
				if err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	var writers sync.WaitGroup
	for w := range 4 {
		writers.Add(1)
		go func() {
			defer writers.Done()
			for i := range 50 {
				_, err := b.store.Insert(ctx, ghDelivery(fmt.Sprintf("w%d-%d", w, i), `{}`))
				if err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	writers.Wait()
	close(stop)
	compactions.Wait()
	requireCountsMatchAScan(t, b.pool, "writers racing compactions")
	require.Equal(t, 200, pgtest.Count(t, b.pool, `SELECT sum(n) FROM envelope_count WHERE source = 'src' AND kind = 'pending'`))
}

// Arrivals (migration 00198) count the envelopes received per source in the
// last hour and day, by minute, for every path that stores one; a
// rolled-back insert leaves nothing, compaction folds each minute into one
// row and ages out what is older than 25 hours, and a TRUNCATE restarts the
// count with its marker.
func TestArrivalsCountedByMinute(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.NewURL(t)
	owner := pgtest.OpenPool(t, url)
	workerPool := pgtest.OpenPool(t, pgtest.RoleURL(t, url, pgtest.RoleWorker))

	_, err := owner.Exec(ctx, `TRUNCATE envelope CASCADE`)
	require.NoError(t, err)
	arrivals := func() envelope.Arrivals {
		t.Helper()
		a, err := envelope.CountArrivals(ctx, workerPool)
		require.NoError(t, err)
		return a
	}
	a := arrivals()
	require.Empty(t, a.BySource)
	require.NotNil(t, a.Since, "the TRUNCATE's marker: counting starts again now")
	require.WithinDuration(t, time.Now(), *a.Since, 2*time.Minute)

	now := time.Now()
	for _, r := range []struct {
		source string
		ago    time.Duration
		n      int
	}{
		{"alpha", 10 * time.Second, 3},
		{"alpha", 30 * time.Minute, 2},
		{"beta", 2 * time.Hour, 1},
		{"beta", 23 * time.Hour, 4},
		{"alpha", 26 * time.Hour, 5}, // older than the kept window: not an arrival
	} {
		envelopetest.InsertMany(t, owner, r.n, func(int) envelopetest.Row {
			return envelopetest.Row{Source: r.source, ReceivedAt: now.Add(-r.ago)}
		})
	}
	// Stored by ingest's own path and role; a duplicate is not an arrival.
	ingestPool := pgtest.OpenPool(t, pgtest.RoleURL(t, url, pgtest.RoleIngest))
	rc, err := envelope.NewInsertClient(ingestPool, slog.New(slog.NewTextHandler(io.Discard, nil)))
	require.NoError(t, err)
	store := envelope.NewStore(ingestPool, rc)
	for _, id := range []string{"g-1", "g-2", "g-1"} {
		d := ghDelivery(id, `{"id":"`+id+`"}`)
		d.Source = "gamma"
		_, err := store.Insert(ctx, d)
		require.NoError(t, err)
	}
	tx, err := owner.Begin(ctx)
	require.NoError(t, err)
	envelopetest.Insert(t, tx, envelopetest.Row{Source: "gamma"})
	require.NoError(t, tx.Rollback(ctx))

	want := map[string]envelope.SourceCounts{
		"alpha": {Source: "alpha", ReceivedLastHour: 5, ReceivedLast24h: 5},
		"beta":  {Source: "beta", ReceivedLastHour: 0, ReceivedLast24h: 5},
		"gamma": {Source: "gamma", ReceivedLastHour: 2, ReceivedLast24h: 2},
	}
	require.Equal(t, want, arrivals().BySource, "before compaction (the rolled-back insert is not counted)")

	// Many statements in one minute, then compaction: one row per minute.
	for range 3 {
		envelopetest.Insert(t, owner, envelopetest.Row{Source: "alpha", ReceivedAt: now})
	}
	want["alpha"] = envelope.SourceCounts{Source: "alpha", ReceivedLastHour: 8, ReceivedLast24h: 8}
	_, err = owner.Exec(ctx, `INSERT INTO envelope_arrival (source, minute, n) VALUES ('alpha', now() - interval '26 hours', 7)`)
	require.NoError(t, err)
	require.Greater(t, pgtest.Count(t, owner, `SELECT count(*) FROM envelope_arrival WHERE source = 'alpha'`), 3)
	folded, err := envelope.CompactCounts(ctx, workerPool)
	require.NoError(t, err)
	require.Positive(t, folded)
	require.Equal(t, want, arrivals().BySource, "after compaction")
	require.Equal(t, 0, pgtest.Count(t, owner, `SELECT count(*) FROM (SELECT 1 FROM envelope_arrival GROUP BY source, minute HAVING count(*) > 1) x`),
		"one row per source and minute once compacted")
	require.Equal(t, 0, pgtest.Count(t, owner, `SELECT count(*) FROM envelope_arrival WHERE minute < now() - interval '25 hours'`), "aged out")

	// A compaction with nothing to fold changes nothing.
	before := pgtest.Count(t, owner, `SELECT count(*) FROM envelope_arrival`)
	_, err = envelope.CompactCounts(ctx, workerPool)
	require.NoError(t, err)
	require.Equal(t, before, pgtest.Count(t, owner, `SELECT count(*) FROM envelope_arrival`))
	require.Equal(t, want, arrivals().BySource)
}
