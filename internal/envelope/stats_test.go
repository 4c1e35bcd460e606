package envelope_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/inboxhq/inbox/internal/envelope"
	"github.com/inboxhq/inbox/internal/envelope/envelopetest"
)

// CountBySource counts per source and status; with repeats also the
// duplicates and conflicts, which without it stay 0.
func TestCountBySource(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	none, err := envelope.CountBySource(ctx, b.pool, true)
	require.NoError(t, err)
	require.Empty(t, none)

	a1 := envelopetest.Insert(t, b.pool, envelopetest.Row{Source: "a"})
	envelopetest.Insert(t, b.pool, envelopetest.Row{Source: "a", Status: "failed"})
	envelopetest.Insert(t, b.pool, envelopetest.Row{Source: "b", Status: "done"})
	envelopetest.Insert(t, b.pool, envelopetest.Row{Source: "b", Status: "ignored"})
	envelopetest.InsertDuplicate(t, b.pool, a1, time.Time{})
	envelopetest.InsertDuplicate(t, b.pool, a1, time.Time{})
	b.exec(t, `INSERT INTO envelope_conflict (envelope_id, source, delivery_id, body_sha256, body_size, body, headers)
		SELECT id, source, delivery_id, body_sha256, 1, 'x', '{}' FROM envelope WHERE id = $1`, a1)

	plain, err := envelope.CountBySource(ctx, b.pool, false)
	require.NoError(t, err)
	require.Equal(t, []envelope.SourceCounts{
		{Source: "a", Pending: 1, Failed: 1, Total: 2},
		{Source: "b", Done: 1, Ignored: 1, Total: 2},
	}, plain)
	require.EqualValues(t, 1, plain[0].Of(envelope.StatusFailed))
	require.EqualValues(t, 0, plain[0].Of(envelope.StatusDone))

	full, err := envelope.CountBySource(ctx, b.pool, true)
	require.NoError(t, err)
	require.Equal(t, []envelope.SourceCounts{
		{Source: "a", Pending: 1, Failed: 1, Total: 2, Duplicates: 2, Conflicts: 1},
		{Source: "b", Done: 1, Ignored: 1, Total: 2},
	}, full)
}

// OldestPending is the pending envelope received first, nil when none is;
// FailureCauses groups failures, most frequent first; CountReplays counts
// replays after a time.
func TestOldestPendingFailuresAndReplays(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	o, err := envelope.OldestPending(ctx, b.pool)
	require.NoError(t, err)
	require.Nil(t, o)

	hourAgo := time.Now().Add(-time.Hour)
	envelopetest.Insert(t, b.pool, envelopetest.Row{Status: "done", ReceivedAt: hourAgo.Add(-time.Hour)})
	oldest := envelopetest.Insert(t, b.pool, envelopetest.Row{Source: "s", ReceivedAt: hourAgo})
	envelopetest.Insert(t, b.pool, envelopetest.Row{})
	o, err = envelope.OldestPending(ctx, b.pool)
	require.NoError(t, err)
	require.Equal(t, oldest, o.EnvelopeID)
	require.Equal(t, "s", o.Source)
	require.InDelta(t, 3600, o.AgeSeconds, 60)

	envelopetest.Insert(t, b.pool, envelopetest.Row{Status: "failed", LastCause: "bad_payload", LastError: "old"})
	latest := envelopetest.Insert(t, b.pool, envelopetest.Row{Status: "failed", LastCause: "bad_payload", LastError: "new"})
	envelopetest.Insert(t, b.pool, envelopetest.Row{Status: "failed"})
	f, err := envelope.FailureCauses(ctx, b.pool, "", 10)
	require.NoError(t, err)
	require.Len(t, f, 2)
	require.Equal(t, envelope.FailureCause{Cause: "bad_payload", Count: 2, LatestID: latest, LatestError: "new"}, f[0])
	require.Equal(t, "", f[1].Cause, "failed before causes were recorded")
	f, err = envelope.FailureCauses(ctx, b.pool, "", 1)
	require.NoError(t, err)
	require.Len(t, f, 1, "limit")

	b.exec(t, `INSERT INTO envelope_replay (envelope_id, actor, reason, filter, batch_id, prior_status, replayed_at)
		VALUES ($1, 'a', 'r', '{}', gen_random_uuid(), 'done', now()), ($1, 'a', 'r', '{}', gen_random_uuid(), 'done', now() - interval '2 days')`, oldest)
	r, err := envelope.CountReplays(ctx, b.pool, time.Now().Add(-24*time.Hour))
	require.NoError(t, err)
	require.Equal(t, envelope.ReplayCounts{Replays: 1, Envelopes: 1, Runs: 1}, r)
}
