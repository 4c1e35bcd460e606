// Package e2e runs the real ingest and worker binaries as processes against
// real PostgreSQL and real HTTP.
package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/inboxhq/inbox/internal/pgtest"
	"github.com/inboxhq/inbox/internal/provider"
	"github.com/inboxhq/inbox/internal/webhooktest"
)

const sourcesYAML = `
sources:
  stripe:
    provider: stripe
    secrets: ["${E2E_STRIPE_SECRET}"]
  github:
    provider: github
    secrets: ["${E2E_GITHUB_SECRET}"]
  shopify:
    provider: shopify
    secrets: ["${E2E_SHOPIFY_SECRET}"]
  payments:
    provider: standard
    secrets: ["${E2E_STANDARD_SECRET}"]
`

var e2eSecrets = map[string]string{
	"E2E_STRIPE_SECRET":   "whsec_e2e_stripe_secret",
	"E2E_GITHUB_SECRET":   "e2e github secret",
	"E2E_SHOPIFY_SECRET":  "e2e-shopify-secret",
	"E2E_STANDARD_SECRET": "whsec_ZTJlLXN0YW5kYXJkLXNlY3JldC0xMjM0NTY3OA==",
}

// stack is a migrated database with ingest and worker running on it.
type stack struct {
	dbURL     string
	pool      *pgxpool.Pool
	ingestURL string
	// ingestAdmin and workerAdmin serve /metrics, /healthz, /readyz.
	ingestAdmin, workerAdmin string
	ingest                   *proc
	worker                   *proc
	env                      []string
}

func writeConfig(t testing.TB) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "sources.yaml")
	require.NoError(t, os.WriteFile(path, []byte(sourcesYAML), 0o600))
	return path
}

func baseEnv(dbURL, cfgPath string) []string {
	env := []string{"DATABASE_URL=" + dbURL, "INBOX_CONFIG=" + cfgPath, "LOG_FORMAT=json"}
	for k, v := range e2eSecrets {
		env = append(env, k+"="+v)
	}
	return env
}

// migrate runs `worker migrate` on dbURL.
func migrate(t testing.TB, env []string) {
	t.Helper()
	p, _ := start(t, "worker", env, "migrate")
	<-p.done
	require.NoError(t, p.err, p.out.String())
}

func startStack(t testing.TB, dbURL string, workerArgs ...string) *stack {
	t.Helper()
	return startStackEnv(t, dbURL, nil, workerArgs...)
}

// startStackEnv is startStack with extra variables in the worker's
// environment.
func startStackEnv(t testing.TB, dbURL string, workerExtra []string, workerArgs ...string) *stack {
	t.Helper()
	env := baseEnv(dbURL, writeConfig(t))
	migrate(t, env)
	// Twice: migrate is safe to run again.
	migrate(t, env)
	s := &stack{dbURL: dbURL, env: env}
	var lines <-chan string
	// Each process logs in as a role with its group's privileges only
	// (migration 00110_roles.sql); migrate and the test's own queries stay
	// the owner's.
	ingestEnv := append(slices.Clip(env), "DATABASE_URL="+pgtest.RoleURL(t, dbURL, pgtest.RoleIngest))
	workerEnv := append(slices.Clip(env), "DATABASE_URL="+pgtest.RoleURL(t, dbURL, pgtest.RoleWorker))
	workerEnv = append(workerEnv, workerExtra...)
	// No refusals while the store is behind (--shed-after): these tests
	// send bursts on a machine the whole suite loads and count every
	// answer, to test dedup and processing; refusals have their own tests
	// (TestDrillStoreStall, whose stack, like every drill's, runs ingest's
	// defaults, and internal/ingest's).
	s.ingest, lines = start(t, "ingest", ingestEnv, "--addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0", "--shed-after", "-1s")
	s.ingestURL = waitListen(t, lines, "ingest listening", 30*time.Second)
	s.ingestAdmin = waitListen(t, lines, "admin listening", 30*time.Second)
	s.worker, lines = start(t, "worker", workerEnv, append([]string{"run", "--fetch-cooldown", "5ms", "--fetch-poll-interval", "50ms", "--admin-addr", "127.0.0.1:0"}, workerArgs...)...)
	waitLog(t, lines, "worker started", 30*time.Second)
	s.workerAdmin = waitListen(t, lines, "admin listening", 30*time.Second)
	pool, err := pgxpool.New(context.Background(), dbURL)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	s.pool = pool
	return s
}

func (s *stack) send(d webhooktest.Delivery, source string) (int, error) {
	req, err := d.Request(context.Background(), s.ingestURL+"/webhooks/"+source)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}

func (s *stack) scalar(t testing.TB, q string, args ...any) int64 {
	t.Helper()
	return pgtest.Scalar[int64](t, s.pool, q, args...)
}

type sent struct {
	source string
	d      webhooktest.Delivery
}

func deliveries(run string) []sent {
	sec := func(k string) string { return e2eSecrets[k] }
	shop := http.Header{"X-Shopify-Shop-Domain": {"e2e.myshopify.com"}}
	var out []sent
	for i := range 5 {
		pi := fmt.Sprintf("pi_%s_%d", run, i)
		evt := fmt.Sprintf("evt_%s_pay_%d", run, i)
		out = append(out, sent{"stripe", webhooktest.Delivery{Provider: provider.Stripe, Secret: sec("E2E_STRIPE_SECRET"), DeliveryID: evt,
			Body: webhooktest.StripePayment(evt, pi, int64(1000+i), "usd")}})
		rf := fmt.Sprintf("evt_%s_ref_%d", run, i)
		out = append(out, sent{"stripe", webhooktest.Delivery{Provider: provider.Stripe, Secret: sec("E2E_STRIPE_SECRET"), DeliveryID: rf,
			Body: webhooktest.StripeRefund(rf, fmt.Sprintf("ch_%s_%d", run, i), pi, int64(1000+i), 100, "usd")}})
		pay := fmt.Sprintf("pay_%s_%d", run, i)
		out = append(out, sent{"payments", webhooktest.Delivery{Provider: provider.Standard, Secret: sec("E2E_STANDARD_SECRET"), DeliveryID: "msg_" + pay,
			Body: webhooktest.StandardPayment(pay, "m_e2e", int64(500+i), "JPY")}})
		out = append(out, sent{"payments", webhooktest.Delivery{Provider: provider.Standard, Secret: sec("E2E_STANDARD_SECRET"), DeliveryID: "msg_ref_" + pay,
			Body: webhooktest.StandardRefund("re_"+pay, pay, "m_e2e", 50, "JPY")}})
		order := int64(7000 + i)
		out = append(out, sent{"shopify", webhooktest.Delivery{Provider: provider.Shopify, Secret: sec("E2E_SHOPIFY_SECRET"), DeliveryID: fmt.Sprintf("%s-order-%d", run, i),
			EventType: "orders/paid", Header: shop, Body: webhooktest.ShopifyOrderPaid(order, "12.345", "KWD")}})
		out = append(out, sent{"shopify", webhooktest.Delivery{Provider: provider.Shopify, Secret: sec("E2E_SHOPIFY_SECRET"), DeliveryID: fmt.Sprintf("%s-refund-%d", run, i),
			EventType: "refunds/create", Header: shop, Body: webhooktest.ShopifyRefund(order*10, order, "1.000", "KWD")}})
		ghID := fmt.Sprintf("%s-gh-%d", run, i)
		out = append(out, sent{"github", webhooktest.Delivery{Provider: provider.GitHub, Secret: sec("E2E_GITHUB_SECRET"), DeliveryID: ghID,
			EventType: "push", Body: webhooktest.GitHubPushOf("refs/heads/main", ghID)}})
	}
	// An event with no handler: ignored.
	out = append(out, sent{"stripe", webhooktest.Delivery{Provider: provider.Stripe, Secret: sec("E2E_STRIPE_SECRET"), DeliveryID: "evt_" + run + "_customer",
		Body: webhooktest.StripeEvent("evt_"+run+"_customer", "customer.created", `{"id":"cus_1","object":"customer"}`)}})
	return out
}

func TestEndToEndAllProvidersWithDuplicates(t *testing.T) {
	t.Parallel()
	s := startStack(t, pgtest.NewURL(t), "--snooze", "200ms")
	all := deliveries("e2e")
	// Every delivery three times, all at once: duplicates race each other.
	const copies = 3
	codes := make(chan int, len(all)*copies)
	var wg sync.WaitGroup
	for range copies {
		for _, x := range all {
			wg.Add(1)
			go func() {
				defer wg.Done()
				code, err := s.send(x.d, x.source)
				if err != nil {
					code = -1
				}
				codes <- code
			}()
		}
	}
	wg.Wait()
	close(codes)
	tally := map[int]int{}
	for c := range codes {
		tally[c]++
	}
	require.Equal(t, map[int]int{202: len(all), 200: len(all) * (copies - 1)}, tally)

	eventually(t, 60*time.Second, "every envelope final", func(ctx context.Context) (bool, string) {
		var pending int
		if err := s.pool.QueryRow(ctx, "SELECT count(*) FROM envelope WHERE status = 'pending'").Scan(&pending); err != nil {
			return false, err.Error()
		}
		return pending == 0, fmt.Sprintf("%d pending", pending)
	})

	require.EqualValues(t, len(all), s.scalar(t, "SELECT count(*) FROM envelope"))
	require.EqualValues(t, len(all)*(copies-1), s.scalar(t, "SELECT count(*) FROM envelope_duplicate"))
	require.EqualValues(t, 1, s.scalar(t, "SELECT count(*) FROM envelope WHERE status = 'ignored'"))
	require.EqualValues(t, len(all)-1, s.scalar(t, "SELECT count(*) FROM envelope WHERE status = 'done'"))
	requireOneJobEachDeleted(t, s, len(all))
	// One ledger transaction per payment event (5 payments + 5 refunds for
	// each of the three payment providers), each balanced.
	require.EqualValues(t, 30, s.scalar(t, "SELECT count(*) FROM ledger_transaction"))
	require.EqualValues(t, 30, s.scalar(t, `SELECT count(DISTINCT envelope_id) FROM ledger_transaction`))
	require.EqualValues(t, 0, s.scalar(t, `SELECT count(*) FROM (SELECT transaction_id, currency FROM ledger_entry GROUP BY 1, 2 HAVING sum(amount_minor) <> 0) x`))
	// Balances: Stripe USD payments 1000..1004, refunds 100 each.
	require.EqualValues(t, 5010-500, s.scalar(t, `SELECT balance_minor FROM ledger_balance WHERE merchant = 'stripe' AND account = 'psp_clearing' AND currency = 'USD'`))
	require.EqualValues(t, 2510-250, s.scalar(t, `SELECT balance_minor FROM ledger_balance WHERE merchant = 'm_e2e' AND account = 'psp_clearing' AND currency = 'JPY'`))
	require.EqualValues(t, 5*12345-5*1000, s.scalar(t, `SELECT balance_minor FROM ledger_balance WHERE merchant = 'e2e.myshopify.com' AND account = 'psp_clearing' AND currency = 'KWD'`))
	// Each attempt is audited.
	require.EqualValues(t, len(all), s.scalar(t, "SELECT count(*) FROM envelope_attempt WHERE outcome IN ('done', 'ignored')"))

	// A bad signature and an unknown source, for the metrics.
	bad := all[len(all)-2].d
	bad.Secret = "not-the-secret"
	code, err := s.send(bad, all[len(all)-2].source)
	require.NoError(t, err)
	require.Equal(t, http.StatusUnauthorized, code)
	code, err = s.send(all[0].d, "nope")
	require.NoError(t, err)
	require.Equal(t, http.StatusNotFound, code)

	// Metrics: each with the value this run must have produced.
	requireHealthy(t, s.ingestAdmin)
	requireHealthy(t, s.workerAdmin)
	im := scrapeUntil(t, s.ingestAdmin,
		want{"inbox_ingest_requests_total", []string{"source", "stripe", "outcome", "accepted"}, 11},
		want{"inbox_ingest_requests_total", []string{"outcome", "accepted"}, float64(len(all))},
		want{"inbox_ingest_duplicates_total", nil, float64(len(all) * (copies - 1))},
		want{"inbox_ingest_signature_failures_total", []string{"source", "github", "reason", "no signature matches"}, 1},
		want{"inbox_ingest_requests_total", []string{"source", "unknown", "outcome", "unknown_source"}, 1},
		want{"inbox_ingest_conflicts_total", nil, 0},
		want{"inbox_ingest_request_duration_seconds", nil, float64(len(all)*copies + 2)},
		want{"inbox_ingest_requests_total", []string{"source", "stripe", "outcome", "unavailable"}, 0},
		want{"inbox_build_info", nil, 1},
	)
	require.True(t, hasPrefix(im, "go_goroutines"))
	wm := scrapeUntil(t, s.workerAdmin,
		want{"inbox_worker_attempts_total", []string{"outcome", "done"}, float64(len(all) - 1)},
		want{"inbox_worker_attempts_total", []string{"outcome", "ignored"}, 1},
		want{"inbox_processing_latency_seconds", []string{"kind", "first"}, float64(len(all))},
		want{"inbox_processing_latency_seconds", []string{"kind", "replay"}, 0},
		want{"inbox_build_info", nil, 1},
		want{"inbox_river_stats_up", nil, 1},
		want{"inbox_ledger_postings_total", []string{"kind", "payment", "result", "posted"}, 15},
		want{"inbox_ledger_postings_total", []string{"kind", "refund", "result", "posted"}, 15},
		want{"inbox_envelopes", []string{"status", "done"}, float64(len(all) - 1)},
		want{"inbox_envelopes", []string{"status", "pending"}, 0},
		want{"inbox_oldest_pending_age_seconds", nil, 0},
		want{"inbox_envelope_stats_up", nil, 1},
		// A refund before its payment snoozes with cause payment_not_posted:
		// both metrics and envelope_attempt.cause say so (one name).
		want{"inbox_worker_snoozes_total", []string{"cause", "payment_not_posted"}, float64(s.scalar(t, "SELECT count(*) FROM envelope_attempt WHERE outcome = 'snoozed' AND cause = 'payment_not_posted'"))},
		want{"inbox_worker_snoozes_total", []string{"cause", "not_ready"}, float64(s.scalar(t, "SELECT count(*) FROM envelope_attempt WHERE outcome = 'snoozed' AND cause = 'not_ready'"))},
		want{"inbox_worker_failures_total", []string{"cause", "payment_not_posted", "outcome", "snoozed"}, float64(s.scalar(t, "SELECT count(*) FROM envelope_attempt WHERE outcome = 'snoozed' AND cause = 'payment_not_posted'"))},
		want{"inbox_worker_failures_total", []string{"outcome", "failed"}, 0},
	)
	require.Equal(t, 4, series(t, wm, "inbox_envelopes", "status", "pending"), "a zero status is exported, per source")
	require.Equal(t, 1, series(t, wm, "inbox_river_jobs", "kind", "process_envelope", "state", "available"), "a River kind is exported with its jobs all completed")
	require.Positive(t, metricSum(t, wm, "inbox_worker_heartbeat_timestamp_seconds"), "the running worker beats")

	require.NoError(t, s.ingest.stop(30*time.Second), "ingest exits 0 on SIGTERM")
	require.NoError(t, s.worker.stop(45*time.Second), "worker exits 0 on SIGTERM")
}

// requireOneJobEachDeleted checks that n envelopes were each finished (done
// or ignored) once, by an attempt of a job of its own, and that no
// processing job is left: the worker deletes an envelope's job in the
// transaction that finishes it, and the attempts keep the job's id.
func requireOneJobEachDeleted(t *testing.T, s *stack, n int) {
	t.Helper()
	require.EqualValues(t, 0, s.scalar(t, "SELECT count(*) FROM river_job WHERE kind = 'process_envelope'"), "no processing job left")
	require.EqualValues(t, n, s.scalar(t, "SELECT count(*) FROM envelope_attempt WHERE outcome IN ('done', 'ignored')"), "each envelope finished once")
	require.EqualValues(t, n, s.scalar(t, "SELECT count(DISTINCT job_id) FROM envelope_attempt WHERE outcome IN ('done', 'ignored')"), "by a job of its own")
}
