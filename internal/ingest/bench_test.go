package ingest_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/inboxhq/inbox/internal/config"
	"github.com/inboxhq/inbox/internal/ingest"
	"github.com/inboxhq/inbox/internal/pgtest"
	"github.com/inboxhq/inbox/internal/provider"
	"github.com/inboxhq/inbox/internal/webhooktest"
)

// BenchmarkIngestHTTP measures verified deliveries stored per second through
// the real HTTP server: signature check, envelope insert, River InsertTx and
// COMMIT per request, with concurrent senders (GOMAXPROCS x 8). Compare its
// deliveries/s with scripts/bench-pipeline's figures (docs/benchmarks.md).
func BenchmarkIngestHTTP(b *testing.B) {
	bb := serve(b, pgtest.NewPool(b), ingest.Options{})
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	var seq atomic.Int64
	b.SetParallelism(8)
	b.ResetTimer()
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			n := seq.Add(1)
			id := fmt.Sprintf("msg_bench_%d_%d", time.Now().UnixNano(), n)
			d := webhooktest.Delivery{Provider: provider.Standard, Secret: standardSecret, DeliveryID: id,
				Body: webhooktest.StandardPayment("pay_"+id, "m_bench", 1000, "USD")}
			req, err := d.Request(context.Background(), bb.url+"/webhooks/payments")
			if err != nil {
				b.Error(err)
				return
			}
			resp, err := client.Do(req)
			if err != nil {
				b.Error(err)
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusAccepted {
				b.Errorf("status %d", resp.StatusCode)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "deliveries/s")
}

// BenchmarkIngestGitHubReplayCheck measures what recognising replayed
// bodies costs a GitHub source (one more statement per batch: the digest
// claim), through the real HTTP server, against the same source with
// replay_check: false, on one database. Sub-benchmarks run in order, each
// -count times: run it again with the order swapped before reading a
// difference (docs/benchmarks.md).
//
//	go test -run '^$' -bench IngestGitHubReplayCheck -benchtime 3000x -count 5 ./internal/ingest
func BenchmarkIngestGitHubReplayCheck(b *testing.B) {
	env := map[string]string{"GITHUB_SECRET": githubSecret}
	cfg, err := config.Parse([]byte(`
sources:
  checked:
    provider: github
    secrets: ["${GITHUB_SECRET}"]
  unchecked:
    provider: github
    secrets: ["${GITHUB_SECRET}"]
    replay_check: false
`), func(k string) string { return env[k] })
	if err != nil {
		b.Fatal(err)
	}
	bb := serveConfig(b, pgtest.NewPool(b), cfg, ingest.Options{})
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	for _, source := range []string{"checked", "unchecked"} {
		b.Run(source, func(b *testing.B) {
			var seq atomic.Int64
			b.SetParallelism(8)
			b.ResetTimer()
			start := time.Now()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					id := fmt.Sprintf("gh_bench_%s_%d_%d", source, time.Now().UnixNano(), seq.Add(1))
					d := webhooktest.Delivery{Provider: provider.GitHub, Secret: githubSecret, DeliveryID: id, EventType: "push",
						Body: webhooktest.GitHubPushOf("refs/heads/main", id)}
					req, err := d.Request(context.Background(), bb.url+"/webhooks/"+source)
					if err != nil {
						b.Error(err)
						return
					}
					resp, err := client.Do(req)
					if err != nil {
						b.Error(err)
						return
					}
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode != http.StatusAccepted {
						b.Errorf("status %d", resp.StatusCode)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "deliveries/s")
		})
	}
}
