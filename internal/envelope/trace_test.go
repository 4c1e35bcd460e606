package envelope_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/inboxhq/inbox/internal/envelope"
	"github.com/inboxhq/inbox/internal/pgtest"
)

// TestInsertKeepsTraceContext: a delivery's trace context is stored with
// it and read back by Get and LockMany (the worker's read); with tracing
// off (no trace context) the column is NULL and the envelope reads as "".
// Deliveries stored in one group-committed transaction keep their own.
func TestInsertKeepsTraceContext(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	tp := func(i int) string { return fmt.Sprintf("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902%02x-01", i) }

	ids := make([]int64, 8)
	var wg sync.WaitGroup
	for i := range ids {
		wg.Go(func() {
			d := delivery(fmt.Sprintf("trace-%d", i))
			if i%2 == 0 {
				d.TraceContext = tp(i)
			}
			res, err := b.store.Insert(ctx, d)
			require.NoError(t, err)
			ids[i] = res.EnvelopeID
		})
	}
	wg.Wait()
	for i, id := range ids {
		var stored *string
		require.NoError(t, b.pool.QueryRow(ctx, `SELECT trace_context FROM envelope WHERE id = $1`, id).Scan(&stored))
		e, err := envelope.Get(ctx, b.pool, id)
		require.NoError(t, err)
		if i%2 == 1 {
			require.Nil(t, stored, "tracing off stores NULL")
			require.Empty(t, e.TraceContext)
			continue
		}
		want := tp(i)
		require.NotNil(t, stored)
		require.Equal(t, want, *stored)
		require.Equal(t, want, e.TraceContext)
	}
	envs, _, err := envelope.LockMany(ctx, pgtest.Tx(t, b.pool), ids, false) // read-only
	require.NoError(t, err)
	require.Equal(t, tp(0), envs[ids[0]].TraceContext)
	require.Empty(t, envs[ids[1]].TraceContext)
}
