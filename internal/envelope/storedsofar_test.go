package envelope_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/inboxhq/inbox/internal/envelope"
	"github.com/inboxhq/inbox/internal/pgtest"
)

// StoredSoFar counts every envelope id drawn (0 before the first: each
// envelope stored, and each insert rolled back), and the
// worker's role may read it: its USAGE on envelope_id_seq suffices, so a
// worker running as inbox_worker learns the arrival rate it yields by
// (worker.Yield.Arrivals). Fails if the count is read from anything the
// role may not read, or misses envelopes.
func TestStoredSoFarCountsEnvelopes(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	n0, err := envelope.StoredSoFar(ctx, b.pool)
	require.NoError(t, err)
	require.Zero(t, n0, "nothing stored yet")
	for i := range 5 {
		_, err := b.store.Insert(ctx, delivery(fmt.Sprintf("msg_count_%d", i)))
		require.NoError(t, err)
	}
	n, err := envelope.StoredSoFar(ctx, b.pool)
	require.NoError(t, err)
	require.EqualValues(t, 5, n)

	// An id drawn and not stored (an insert rolled back) counts too: the
	// sequence is read, not the table, whatever its size.
	drawn, err := b.pool.Begin(ctx)
	require.NoError(t, err)
	_, err = drawn.Exec(ctx, "SELECT nextval('envelope_id_seq')")
	require.NoError(t, err)
	require.NoError(t, drawn.Rollback(ctx))
	n, err = envelope.StoredSoFar(ctx, b.pool)
	require.NoError(t, err)
	require.EqualValues(t, 6, n, "the ids drawn")
	require.Equal(t, 5, pgtest.Count(t, b.pool, "SELECT count(*) FROM envelope"), "the rows stored")

	tx, err := b.pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = tx.Exec(ctx, "SET LOCAL ROLE inbox_worker")
	require.NoError(t, err)
	n, err = envelope.StoredSoFar(ctx, tx)
	require.NoError(t, err, "the worker's role reads it")
	require.EqualValues(t, 6, n)
}
