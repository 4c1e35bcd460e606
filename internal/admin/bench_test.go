package admin

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/inboxhq/inbox/internal/envelope"
)

// BenchmarkReplay100k times a dry run and a real replay (default batch size)
// of 100,000 failed envelopes, each op on a freshly seeded database:
//
//	go test -run '^$' -bench Replay100k ./internal/admin
//
// It reports dryrun-ms and replay-ms per op, and envelopes replayed per
// second; ns/op also includes neither seeding nor database setup.
func BenchmarkReplay100k(b *testing.B) {
	const n = 100_000
	ctx := context.Background()
	var dry, replay, seed time.Duration
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		bd := setup(b)
		t0 := time.Now()
		seedFailed(b, bd.pool, "gh", n)
		_, err := bd.pool.Exec(ctx, `ANALYZE envelope`)
		require.NoError(b, err)
		seed += time.Since(t0)
		f := Filter{Source: "gh", Status: envelope.StatusFailed}
		b.StartTimer()

		t1 := time.Now()
		d, err := DryRun(ctx, bd.pool, f, 0)
		dry += time.Since(t1)
		require.NoError(b, err)
		require.Equal(b, n, d.Matched)

		t2 := time.Now()
		res, err := Replay(ctx, bd.pool, bd.jobs, ReplayRequest{Filter: f, Actor: "bench", Reason: "benchmark"})
		replay += time.Since(t2)
		require.NoError(b, err)
		require.Equal(b, n, res.Replayed)
	}
	ops := float64(b.N)
	b.ReportMetric(seed.Seconds()*1000/ops, "seed-ms")
	b.ReportMetric(dry.Seconds()*1000/ops, "dryrun-ms")
	b.ReportMetric(replay.Seconds()*1000/ops, "replay-ms")
	b.ReportMetric(n*ops/replay.Seconds(), "envelopes/s")
}
