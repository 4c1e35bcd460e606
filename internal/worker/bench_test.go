package worker_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/inboxhq/inbox/internal/envelope"
	"github.com/inboxhq/inbox/internal/pgtest"
	"github.com/inboxhq/inbox/internal/webhooktest"
	"github.com/inboxhq/inbox/internal/worker"
)

// BenchmarkDrain measures envelopes processed per second by a worker at its
// defaults (worker.Config{}): b.N Standard Webhooks payments over 100
// merchants are stored first, then the worker drains them. The whole
// pipeline's figures, against their baselines, come from
// scripts/bench-pipeline.
func BenchmarkDrain(b *testing.B) {
	bb := setup(b)
	ctx := context.Background()
	var wg sync.WaitGroup
	sem := make(chan struct{}, 32)
	for i := range b.N {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			id := fmt.Sprintf("bench-%d", i)
			body := webhooktest.StandardPayment("pay_"+id, fmt.Sprintf("m_%03d", i%100), 1000, "EUR")
			_, err := bb.store.Insert(ctx, envelope.NewDelivery{Source: "src", Provider: "standard", DeliveryID: id,
				EventType: "payment.succeeded", Body: body, Payload: body, Headers: map[string]string{}})
			if err != nil {
				b.Error(err)
			}
		}()
	}
	wg.Wait()
	b.ResetTimer()
	start := time.Now()
	client, err := worker.NewClient(bb.worker, bb.registry, worker.Config{}, slog.New(slog.NewJSONHandler(io.Discard, nil)))
	require.NoError(b, err)
	require.NoError(b, client.Start(ctx))
	defer func() { _ = client.Stop(ctx) }()
	// Generous: a deadline for a stuck worker, not a measure of speed.
	pgtest.EventuallyEvery(b, 10*time.Minute, 20*time.Millisecond, "every envelope to leave pending", func() (bool, string) {
		pending := pgtest.Count(b, bb.pool, `SELECT count(*) FROM envelope WHERE status = 'pending'`)
		return pending == 0, fmt.Sprintf("%d pending", pending)
	})
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "envelopes/s")
}
