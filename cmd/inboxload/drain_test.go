package main

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/inboxhq/inbox/internal/envelope/envelopetest"
	"github.com/inboxhq/inbox/internal/pgtest"
)

// The drain's wait ends when nothing received since --since is pending: it
// waits, up to its deadline, while such an envelope is pending, and does not
// wait for one received before --since that stays pending.
func TestAwaitDrainedWaitsForThePendingSinceFromOnly(t *testing.T) {
	t.Parallel()
	url := pgtest.NewURL(t)
	pool := pgtest.OpenPool(t, url)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer conn.Close(ctx)

	from := time.Now().Add(-time.Minute)
	envelopetest.Insert(t, pool, envelopetest.Row{ReceivedAt: from.Add(-time.Minute)}) // stays pending
	recent := envelopetest.Insert(t, pool, envelopetest.Row{})

	// While the recent one is pending, the wait lasts until its deadline.
	deadline := time.Now().Add(1500 * time.Millisecond)
	require.NoError(t, awaitDrained(ctx, conn, from, deadline))
	require.False(t, time.Now().Before(deadline), "returned before its deadline with an envelope since from pending")

	// Once it is done, only the older one is pending: the wait ends long
	// before its deadline.
	_, err = pool.Exec(ctx, `UPDATE envelope SET status = 'done', processed_at = now() WHERE id = $1`, recent)
	require.NoError(t, err)
	deadline = time.Now().Add(time.Minute)
	require.NoError(t, awaitDrained(ctx, conn, from, deadline))
	require.True(t, time.Now().Before(deadline), "waited for an envelope received before from")
	require.Equal(t, 1, pgtest.Count(t, pool, `SELECT count(*) FROM envelope WHERE status = 'pending'`))
}
