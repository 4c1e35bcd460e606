package envelope_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/inboxhq/inbox/internal/envelope"
	"github.com/inboxhq/inbox/internal/pgtest"
)

type storeBundle struct {
	pool  *pgxpool.Pool
	store *envelope.Store
}

func setupStore(t *testing.T, opts envelope.StoreOptions) *storeBundle {
	t.Helper()
	pool := pgtest.NewPool(t)
	rc, err := envelope.NewInsertClient(pool, slog.New(slog.NewTextHandler(io.Discard, nil)))
	require.NoError(t, err)
	return &storeBundle{pool: pool, store: envelope.NewStoreWith(pool, rc, opts)}
}

func ghDelivery(id, body string) envelope.NewDelivery {
	return envelope.NewDelivery{Source: "src", Provider: "github", DeliveryID: id, EventType: "push",
		Body: []byte(body), Payload: []byte(body), Headers: map[string]string{"X-GitHub-Event": "push"}}
}

// holdInserts blocks every envelope insert until the returned func is
// called, so that the deliveries sent meanwhile queue up and are committed
// together once it is released.
func (b *storeBundle) holdInserts(t *testing.T) (release func()) {
	t.Helper()
	ctx := context.Background()
	tx := pgtest.Tx(t, b.pool)
	_, err := tx.Exec(ctx, "LOCK TABLE envelope IN SHARE MODE")
	require.NoError(t, err)
	var once sync.Once
	return func() { once.Do(func() { require.NoError(t, tx.Rollback(ctx)) }) }
}

type answer struct {
	res envelope.InsertResult
	err error
}

// sendTogether starts every delivery at once while inserts are held, waits
// until all of them wait in the store's queue or its one transaction, then
// releases the hold and returns the answers in order.
func (b *storeBundle) sendTogether(t *testing.T, ds []envelope.NewDelivery) []answer {
	t.Helper()
	release := b.holdInserts(t)
	answers := make([]answer, len(ds))
	var wg sync.WaitGroup
	// The first one takes the only transaction slot and blocks on the lock.
	wg.Add(1)
	go func() {
		defer wg.Done()
		r, err := b.store.Insert(context.Background(), ds[0])
		answers[0] = answer{r, err}
	}()
	pgtest.EventuallyEvery(t, 10*time.Second, 5*time.Millisecond, "an envelope insert waiting on the lock", func() (bool, string) {
		return pgtest.Count(t, b.pool, `SELECT count(*) FROM `+pgtest.Locks+` l JOIN pg_class c ON c.oid = l.relation WHERE c.relname = 'envelope' AND NOT l.granted`) > 0, ""
	})
	for i := 1; i < len(ds); i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			r, err := b.store.Insert(context.Background(), ds[i])
			answers[i] = answer{r, err}
		}(i)
	}
	// Every other delivery waits in the queue: the next transaction takes
	// them all (MaxBatch permitting).
	pgtest.EventuallyEvery(t, 10*time.Second, time.Millisecond, "the other deliveries queued", func() (bool, string) {
		n := b.store.Queued()
		return n == len(ds)-1, fmt.Sprintf("%d of %d queued", n, len(ds)-1)
	})
	release()
	wg.Wait()
	return answers
}

func TestConcurrentDeliveriesShareATransactionAndEachGetsItsOwnAnswer(t *testing.T) {
	t.Parallel()
	b := setupStore(t, envelope.StoreOptions{MaxConcurrent: 1, MaxBatch: 64})
	// Stored before: one to be redelivered with the same body, one with another.
	_, err := b.store.Insert(context.Background(), ghDelivery("old-same", `{"n":1}`))
	require.NoError(t, err)
	_, err = b.store.Insert(context.Background(), ghDelivery("old-diff", `{"n":1}`))
	require.NoError(t, err)

	ds := []envelope.NewDelivery{ghDelivery("first", `{"first":1}`)}
	for i := range 20 {
		ds = append(ds, ghDelivery(fmt.Sprintf("new-%02d", i), fmt.Sprintf(`{"i":%d}`, i)))
	}
	ds = append(ds,
		ghDelivery("old-same", `{"n":1}`),   // duplicate of a stored envelope
		ghDelivery("old-diff", `{"n":2}`),   // conflict with a stored envelope
		ghDelivery("new-03", `{"i":3}`),     // duplicate of a new one in the same transaction
		ghDelivery("new-04", `{"other":4}`), // conflict with a new one in the same transaction
	)
	txBefore, _ := b.store.InsertStats()
	answers := b.sendTogether(t, ds)
	txAfter, _ := b.store.InsertStats()
	require.Equal(t, int64(2), txAfter-txBefore, "the first delivery, then all that waited behind it")
	// Counted by the database, not by the batcher: a batch that fell back
	// to a transaction per delivery (a statement refused for two copies of
	// one delivery) would still count as one batch. Every row the second
	// batch wrote carries its one transaction id.
	require.Equal(t, 2, pgtest.Count(t, b.pool, `SELECT count(DISTINCT xmin::text) FROM envelope WHERE delivery_id NOT LIKE 'old-%'`),
		"the new envelopes were written by two transactions")
	require.Equal(t, 1, pgtest.Count(t, b.pool, `SELECT count(DISTINCT xmin::text) FROM envelope WHERE delivery_id NOT LIKE 'old-%' AND delivery_id <> 'first'`),
		"the 23 envelopes of the second batch, with two copies of new-03 and of new-04 among them, in one transaction")
	require.Equal(t, 1, pgtest.Count(t, b.pool, `SELECT count(DISTINCT r.xmin::text) FROM river_job r JOIN envelope e ON e.id = (r.args->>'envelope_id')::bigint
		WHERE e.delivery_id NOT LIKE 'old-%' AND e.delivery_id <> 'first'`), "and their jobs in the same one")
	require.Equal(t, 1, pgtest.Count(t, b.pool, `SELECT count(DISTINCT xmin::text) FROM (SELECT xmin FROM envelope_duplicate UNION ALL SELECT xmin FROM envelope_conflict) x`),
		"the duplicates and conflicts too")

	// Two copies of one delivery id in one transaction: whichever came
	// first is stored, the other is its duplicate or conflict.
	pair := func(first, second int) (stored, other answer) {
		a, b := answers[first], answers[second]
		if a.err == nil && !a.res.Duplicate {
			return a, b
		}
		return b, a
	}
	ids := map[string]int64{}
	for i, a := range answers[:21] {
		if i == 4 || i == 5 { // new-03 and new-04 have second copies
			continue
		}
		require.NoError(t, a.err, ds[i].DeliveryID)
		require.False(t, a.res.Duplicate)
		require.NotZero(t, a.res.EnvelopeID)
		ids[ds[i].DeliveryID] = a.res.EnvelopeID
	}
	dupOld, conflictOld := answers[21], answers[22]
	require.NoError(t, dupOld.err)
	require.True(t, dupOld.res.Duplicate)
	var c *envelope.ConflictError
	require.ErrorAs(t, conflictOld.err, &c)
	require.NotZero(t, c.ConflictID)

	stored, dupNew := pair(4, 23)
	require.NoError(t, stored.err)
	require.False(t, stored.res.Duplicate)
	require.NoError(t, dupNew.err)
	require.True(t, dupNew.res.Duplicate)
	require.Equal(t, stored.res.EnvelopeID, dupNew.res.EnvelopeID)
	ids["new-03"] = stored.res.EnvelopeID

	stored, conflictNew := pair(5, 24)
	require.NoError(t, stored.err)
	require.False(t, stored.res.Duplicate)
	require.ErrorAs(t, conflictNew.err, &c)
	require.Equal(t, stored.res.EnvelopeID, c.EnvelopeID)
	ids["new-04"] = stored.res.EnvelopeID
	require.Len(t, ids, 21, "distinct envelopes")
	var storedBody string
	require.NoError(t, b.pool.QueryRow(context.Background(), `SELECT convert_from(body, 'UTF8') FROM envelope_with_body WHERE id = $1`, ids["new-04"]).Scan(&storedBody))
	if answers[5] == stored {
		require.Equal(t, `{"i":4}`, storedBody, "the copy answered 202 is the one stored")
	} else {
		require.Equal(t, `{"other":4}`, storedBody, "the copy answered 202 is the one stored")
	}

	require.Equal(t, 23, pgtest.Count(t, b.pool, `SELECT count(*) FROM envelope`))
	require.Equal(t, 23, pgtest.Count(t, b.pool, `SELECT count(*) FROM river_job WHERE kind = 'process_envelope'`))
	require.Equal(t, 23, pgtest.Count(t, b.pool, `SELECT count(DISTINCT (args->>'envelope_id')::bigint) FROM river_job WHERE kind = 'process_envelope'`))
	require.Equal(t, 2, pgtest.Count(t, b.pool, `SELECT count(*) FROM envelope_duplicate`))
	require.Equal(t, 2, pgtest.Count(t, b.pool, `SELECT count(*) FROM envelope_conflict`))
}

func TestARowTheDatabaseRefusesFailsAloneAndItsNeighboursAreStored(t *testing.T) {
	t.Parallel()
	b := setupStore(t, envelope.StoreOptions{MaxConcurrent: 1})
	bad := ghDelivery("bad", `{}`)
	bad.Source = "Not A Valid Source" // refused by envelope's CHECK
	ds := []envelope.NewDelivery{ghDelivery("a", `{}`), ghDelivery("b", `{}`), bad, ghDelivery("c", `{}`)}
	answers := b.sendTogether(t, ds)
	for i, a := range answers {
		if i == 2 {
			require.Error(t, a.err)
			continue
		}
		require.NoError(t, a.err, ds[i].DeliveryID)
		require.NotZero(t, a.res.EnvelopeID)
	}
	require.Equal(t, 3, pgtest.Count(t, b.pool, `SELECT count(*) FROM envelope`))
	require.Equal(t, 3, pgtest.Count(t, b.pool, `SELECT count(*) FROM river_job WHERE kind = 'process_envelope'`))
}

func TestAJobThatCannotBeEnqueuedStoresNeitherItsEnvelopeNorFailsItsNeighbours(t *testing.T) {
	t.Parallel()
	b := setupStore(t, envelope.StoreOptions{MaxConcurrent: 1})
	ctx := context.Background()
	_, err := b.pool.Exec(ctx, `
		CREATE FUNCTION refuse_boom() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			IF NEW.args->>'source' = 'boom' THEN RAISE EXCEPTION 'job insert refused'; END IF;
			RETURN NEW;
		END $$;
		CREATE TRIGGER refuse_boom BEFORE INSERT ON river_job FOR EACH ROW EXECUTE FUNCTION refuse_boom();`)
	require.NoError(t, err)
	boom := ghDelivery("boom-1", `{}`)
	boom.Source = "boom"
	answers := b.sendTogether(t, []envelope.NewDelivery{ghDelivery("a", `{}`), boom, ghDelivery("b", `{}`)})
	require.NoError(t, answers[0].err)
	require.ErrorContains(t, answers[1].err, "job insert refused")
	require.NoError(t, answers[2].err)
	require.Equal(t, 0, pgtest.Count(t, b.pool, `SELECT count(*) FROM envelope WHERE source = 'boom'`), "no envelope without its job")
	require.Equal(t, 2, pgtest.Count(t, b.pool, `SELECT count(*) FROM envelope`))
	require.Equal(t, 2, pgtest.Count(t, b.pool, `SELECT count(*) FROM river_job WHERE kind = 'process_envelope'`))
}

func TestADeliveryWhoseContextEndsWhileQueuedIsNotStored(t *testing.T) {
	t.Parallel()
	b := setupStore(t, envelope.StoreOptions{MaxConcurrent: 1})
	release := b.holdInserts(t)
	first := make(chan error, 1)
	go func() { _, err := b.store.Insert(context.Background(), ghDelivery("first", `{}`)); first <- err }()
	pgtest.EventuallyEvery(t, 10*time.Second, 5*time.Millisecond, "an envelope insert waiting on the lock", func() (bool, string) {
		return pgtest.Count(t, b.pool, `SELECT count(*) FROM `+pgtest.Locks+` l JOIN pg_class c ON c.oid = l.relation WHERE c.relname = 'envelope' AND NOT l.granted`) > 0, ""
	})
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err := b.store.Insert(ctx, ghDelivery("impatient", `{}`))
	require.True(t, errors.Is(err, context.DeadlineExceeded), "got %v", err)
	release()
	require.NoError(t, <-first)
	require.Equal(t, 0, pgtest.Count(t, b.pool, `SELECT count(*) FROM envelope WHERE delivery_id = 'impatient'`))
	require.Equal(t, 1, pgtest.Count(t, b.pool, `SELECT count(*) FROM envelope`))
}
