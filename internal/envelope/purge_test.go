package envelope_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/inboxhq/inbox/internal/envelope"
	"github.com/inboxhq/inbox/internal/envelope/envelopetest"
	"github.com/inboxhq/inbox/internal/pgtest"
)

// DropBodies empties body and payload of final envelopes processed before
// the cutoff, after the cursor, once; a dry run changes nothing.
func TestDropBodies(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	base := time.Now().Add(-48 * time.Hour)
	a := envelopetest.Insert(t, b.pool, envelopetest.Row{Status: "done", ReceivedAt: base, ProcessedAt: base})
	c := envelopetest.Insert(t, b.pool, envelopetest.Row{Status: "done", ReceivedAt: base, ProcessedAt: base.Add(time.Minute)})
	envelopetest.Insert(t, b.pool, envelopetest.Row{Status: "failed", ReceivedAt: base, ProcessedAt: base})

	batch := envelope.PurgeBatch{Cutoff: time.Now().Add(-time.Hour), Limit: 10, DryRun: true}
	n, last, err := envelope.DropBodies(ctx, b.pool, batch)
	require.NoError(t, err)
	require.Equal(t, 2, n)
	require.Equal(t, c, last.ID)
	require.Equal(t, 0, pgtest.Count(t, b.pool, `SELECT count(*) FROM envelope WHERE body IS NULL`), "a dry run changes nothing")

	batch.DryRun = false
	batch.After = envelope.PurgeCursor{ProcessedAt: base, ID: a}
	n, last, err = envelope.DropBodies(ctx, b.pool, batch)
	require.NoError(t, err)
	require.Equal(t, 1, n, "after the cursor only")
	require.Equal(t, c, last.ID)
	require.Equal(t, 1, pgtest.Count(t, b.pool, `SELECT count(*) FROM envelope WHERE body IS NULL AND payload IS NULL AND body_purged_at IS NOT NULL AND id = $1`, c))

	n, _, err = envelope.DropBodies(ctx, b.pool, batch)
	require.NoError(t, err)
	require.Equal(t, 0, n, "a purged body is not dropped twice")
}
