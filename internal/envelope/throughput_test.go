package envelope_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/inboxhq/inbox/internal/envelope"
	"github.com/inboxhq/inbox/internal/envelope/envelopetest"
)

func TestMeasureThroughput(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	none, err := envelope.MeasureThroughput(ctx, b.pool, time.Time{})
	require.NoError(t, err)
	require.Equal(t, envelope.Throughput{}, none)

	t0 := time.Date(2026, 1, 2, 3, 0, 0, 0, time.UTC)
	envelopetest.Insert(t, b.pool, envelopetest.Row{ReceivedAt: t0.Add(-time.Hour), Status: "done"}) // before since
	envelopetest.Insert(t, b.pool, envelopetest.Row{ReceivedAt: t0, Status: "done", ProcessedAt: t0.Add(100 * time.Millisecond)})
	envelopetest.Insert(t, b.pool, envelopetest.Row{ReceivedAt: t0.Add(time.Second), Status: "failed", ProcessedAt: t0.Add(3 * time.Second)})
	envelopetest.Insert(t, b.pool, envelopetest.Row{ReceivedAt: t0.Add(4 * time.Second)})

	r, err := envelope.MeasureThroughput(ctx, b.pool, t0)
	require.NoError(t, err)
	require.EqualValues(t, 3, r.Envelopes)
	require.EqualValues(t, 1, r.Pending)
	require.EqualValues(t, 1, r.Failed)
	require.InDelta(t, 2.9, r.Seconds, 1e-9)
	require.InDelta(t, 1050, r.LatencyP50ms, 1e-6)
	require.InDelta(t, 2000, r.LatencyMaxms, 1e-6)
	require.True(t, r.LastReceived.Equal(t0.Add(4*time.Second)), "last received %v", r.LastReceived)
	require.True(t, r.LastProcessed.Equal(t0.Add(3*time.Second)), "last processed %v", r.LastProcessed)

	all, err := envelope.MeasureThroughput(ctx, b.pool, time.Time{})
	require.NoError(t, err)
	require.EqualValues(t, 4, all.Envelopes)
}
