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
	sendParallel(b, bb.url+"/webhooks/payments", func(id string) webhooktest.Delivery {
		return webhooktest.Delivery{Provider: provider.Standard, Secret: standardSecret, DeliveryID: id,
			Body: webhooktest.StandardPayment("pay_"+id, "m_bench", 1000, "USD")}
	})
}

// sendParallel posts b.N deliveries made by delivery (from a unique id) to
// url from GOMAXPROCS x 8 senders, each answer required to be 202, and
// reports deliveries/s.
func sendParallel(b *testing.B, url string, delivery func(id string) webhooktest.Delivery) {
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	var seq atomic.Int64
	b.SetParallelism(8)
	b.ResetTimer()
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			d := delivery(fmt.Sprintf("bench_%d_%d", time.Now().UnixNano(), seq.Add(1)))
			req, err := d.Request(context.Background(), url)
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
	for _, source := range []string{"checked", "unchecked"} {
		b.Run(source, func(b *testing.B) {
			sendParallel(b, bb.url+"/webhooks/"+source, func(id string) webhooktest.Delivery {
				return webhooktest.Delivery{Provider: provider.GitHub, Secret: githubSecret, DeliveryID: id, EventType: "push",
					Body: webhooktest.GitHubPushOf("refs/heads/main", id)}
			})
		})
	}
}
