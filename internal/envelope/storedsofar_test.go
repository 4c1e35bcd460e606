package envelope_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/inboxhq/inbox/internal/envelope"
)

// StoredSoFar counts every envelope stored (0 before the first), and the
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

	tx, err := b.pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = tx.Exec(ctx, "SET LOCAL ROLE inbox_worker")
	require.NoError(t, err)
	n, err = envelope.StoredSoFar(ctx, tx)
	require.NoError(t, err, "the worker's role reads it")
	require.EqualValues(t, 5, n)
}
