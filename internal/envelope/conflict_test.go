package envelope_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/inboxhq/inbox/internal/envelope"
	"github.com/inboxhq/inbox/internal/pgtest"
)

// Conflicts are stored once per distinct body and bounded per envelope
// (issue 22: an identical variant resent 5 times made 5 rows, and 3,000
// variants of one captured body were stored whole): a variant resent counts
// on its row, past MaxConflictVariants further variants count on one
// overflow row without their bodies. Every conflicting delivery is still
// answered as a conflict, and counted.
func TestConflictsAreStoredOncePerVariantAndBounded(t *testing.T) {
	t.Parallel()
	b := setupStore(t, envelope.StoreOptions{})
	ctx := context.Background()
	orig, err := b.store.Insert(ctx, ghDelivery("d-1", `{"v":0}`))
	require.NoError(t, err)

	send := func(body string) *envelope.ConflictError {
		t.Helper()
		_, err := b.store.Insert(ctx, ghDelivery("d-1", body))
		var c *envelope.ConflictError
		require.ErrorAs(t, err, &c)
		require.Equal(t, orig.EnvelopeID, c.EnvelopeID)
		return c
	}
	first := send(`{"v":1}`)
	require.Equal(t, envelope.ConflictStored, first.Kept)
	for range 4 {
		again := send(`{"v":1}`)
		require.Equal(t, envelope.ConflictRepeat, again.Kept)
		require.Equal(t, first.ConflictID, again.ConflictID)
	}
	require.Equal(t, 5, pgtest.Count(t, b.pool, `SELECT repeats FROM envelope_conflict WHERE id = $1`, first.ConflictID))

	for v := 2; v <= envelope.MaxConflictVariants; v++ {
		require.Equal(t, envelope.ConflictStored, send(fmt.Sprintf(`{"v":%d}`, v)).Kept)
	}
	var over *envelope.ConflictError
	for v := range 5 {
		over = send(fmt.Sprintf(`{"past":%d}`, v))
		require.Equal(t, envelope.ConflictOverflow, over.Kept)
	}
	require.Equal(t, envelope.MaxConflictVariants+1, pgtest.Count(t, b.pool, `SELECT count(*) FROM envelope_conflict WHERE envelope_id = $1`, orig.EnvelopeID))
	require.Equal(t, 1, pgtest.Count(t, b.pool, `SELECT count(*) FROM envelope_conflict WHERE overflow AND body IS NULL AND repeats = 5 AND id = $1`, over.ConflictID))
	total := 5 + (envelope.MaxConflictVariants - 1) + 5
	require.Equal(t, total, pgtest.Count(t, b.pool, `SELECT sum(repeats) FROM envelope_conflict`))
	counts, err := envelope.CountBySource(ctx, b.pool, true)
	require.NoError(t, err)
	require.EqualValues(t, total, counts[0].Conflicts, "every conflicting delivery counted")
	require.Equal(t, 1, pgtest.Count(t, b.pool, `SELECT count(*) FROM envelope`), "the original untouched")
}

// Resends of one variant at the same moment make one row: both are held
// at the conflict table until both are in flight (the second waits on the
// envelope's lock), then let go.
func TestConcurrentResendsOfOneVariantMakeOneRow(t *testing.T) {
	t.Parallel()
	b := setupStore(t, envelope.StoreOptions{MaxConcurrent: 2, MaxBatch: 1})
	ctx := context.Background()
	_, err := b.store.Insert(ctx, ghDelivery("d-1", `{"v":0}`))
	require.NoError(t, err)
	hold := pgtest.Tx(t, b.pool)
	_, err = hold.Exec(ctx, `LOCK TABLE envelope_conflict IN SHARE MODE`)
	require.NoError(t, err)
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := b.store.Insert(ctx, ghDelivery("d-1", `{"v":1}`))
			var c *envelope.ConflictError
			if !errors.As(err, &c) {
				t.Errorf("want a conflict, got %v", err)
			}
		}()
	}
	pgtest.EventuallyEvery(t, 20*time.Second, 5*time.Millisecond, "both resends waiting", func() (bool, string) {
		n := pgtest.Count(t, b.pool, `SELECT count(*) FROM `+pgtest.Locks+` l LEFT JOIN pg_class c ON c.oid = l.relation
			WHERE NOT l.granted AND (c.relname LIKE 'envelope_conflict%' OR l.locktype = 'advisory')`)
		return n == 2, fmt.Sprintf("%d waiting", n)
	})
	require.NoError(t, hold.Rollback(ctx))
	wg.Wait()
	require.Equal(t, 1, pgtest.Count(t, b.pool, `SELECT count(*) FROM envelope_conflict`))
	require.Equal(t, 2, pgtest.Count(t, b.pool, `SELECT repeats FROM envelope_conflict`))
}
