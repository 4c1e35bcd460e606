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

// DeleteTombstones takes final envelopes processed before the cutoff in
// (processed_at, id) order from the cursor, with their dependent rows; a
// dry run counts the same and deletes nothing. Pending and failed ones and
// younger ones stay.
func TestDeleteTombstones(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	base := time.Now().Add(-48 * time.Hour).Truncate(time.Second)
	first := envelopetest.Insert(t, b.pool, envelopetest.Row{Status: "done", ReceivedAt: base, ProcessedAt: base})
	second := envelopetest.Insert(t, b.pool, envelopetest.Row{Status: "ignored", ReceivedAt: base, ProcessedAt: base.Add(time.Second)})
	envelopetest.Insert(t, b.pool, envelopetest.Row{Status: "failed", ReceivedAt: base, ProcessedAt: base})
	envelopetest.Insert(t, b.pool, envelopetest.Row{ReceivedAt: base})
	young := envelopetest.Insert(t, b.pool, envelopetest.Row{Status: "done"})
	envelopetest.InsertDuplicate(t, b.pool, first, time.Time{})
	envelopetest.InsertDuplicate(t, b.pool, first, time.Time{})
	envelopetest.InsertAttempt(t, b.pool, envelopetest.Attempt{EnvelopeID: second, Attempt: 1, Outcome: "done"})

	cutoff := time.Now().Add(-time.Hour)
	batch := envelope.PurgeBatch{Cutoff: cutoff, Limit: 1, DryRun: true}
	n, last, d, err := envelope.DeleteTombstones(ctx, b.pool, batch)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.Equal(t, first, last.ID)
	require.Equal(t, envelope.Deleted{Envelopes: 1, Duplicates: 2}, d)
	require.Equal(t, 5, pgtest.Count(t, b.pool, `SELECT count(*) FROM envelope`), "a dry run deletes nothing")

	batch.DryRun, batch.Limit = false, 10
	n, last, d, err = envelope.DeleteTombstones(ctx, b.pool, batch)
	require.NoError(t, err)
	require.Equal(t, 2, n)
	require.Equal(t, second, last.ID)
	require.True(t, last.ProcessedAt.Equal(base.Add(time.Second)), "the last one's position: %s", last.ProcessedAt)
	require.Equal(t, envelope.Deleted{Envelopes: 2, Attempts: 1, Duplicates: 2}, d)
	require.Equal(t, 3, pgtest.Count(t, b.pool, `SELECT count(*) FROM envelope`))
	require.Equal(t, 1, pgtest.Count(t, b.pool, `SELECT count(*) FROM envelope WHERE id = $1`, young))

	n, _, _, err = envelope.DeleteTombstones(ctx, b.pool, batch)
	require.NoError(t, err)
	require.Equal(t, 0, n, "nothing left before the cutoff")
}

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
