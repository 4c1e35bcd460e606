package ingest_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/inboxhq/inbox/internal/config"
	"github.com/inboxhq/inbox/internal/envelope"
	"github.com/inboxhq/inbox/internal/ingest"
	"github.com/inboxhq/inbox/internal/ingest/ingestconfig"
	"github.com/inboxhq/inbox/internal/labels"
	"github.com/inboxhq/inbox/internal/pg"
	"github.com/inboxhq/inbox/internal/pgtest"
	"github.com/inboxhq/inbox/internal/provider"
	"github.com/inboxhq/inbox/internal/testlog"
	"github.com/inboxhq/inbox/internal/webhooktest"
)

const (
	stripeSecret   = "whsec_ingest_test_stripe"
	githubSecret   = "gh-ingest-test-secret"
	shopifySecret  = "shopify-ingest-test-secret"
	standardSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
)

var secrets = map[string]string{
	"stripe":   stripeSecret,
	"github":   githubSecret,
	"shopify":  shopifySecret,
	"payments": standardSecret,
}

const sourcesYAML = `
sources:
  stripe:
    provider: stripe
    secrets: ["${STRIPE_SECRET}"]
    tolerance: 5m
  github:
    provider: github
    secrets: ["${GITHUB_SECRET}"]
  shopify:
    provider: shopify
    secrets: ["${SHOPIFY_SECRET}"]
    max_body_bytes: 2048
  payments:
    provider: standard
    secrets: ["whsec_b2xkLXNlY3JldC1vbGQtc2VjcmV0LTEyMzQ=", "${STANDARD_SECRET}"]
`

type bundle struct {
	pool  *pgxpool.Pool
	url   string
	logs  *testlog.Buffer
	srv   *ingest.Server
	store *envelope.Store
}

func loadConfig(t testing.TB) *config.Config {
	t.Helper()
	env := map[string]string{"STRIPE_SECRET": stripeSecret, "GITHUB_SECRET": githubSecret, "SHOPIFY_SECRET": shopifySecret, "STANDARD_SECRET": standardSecret}
	cfg, err := config.Parse([]byte(sourcesYAML), func(k string) string { return env[k] })
	require.NoError(t, err)
	return cfg
}

// sourcesOf is cfg's sources as ingest serves them (what cmd/ingest builds).
func sourcesOf(t testing.TB, cfg *config.Config) map[string]ingest.Source {
	t.Helper()
	sources, err := ingestconfig.Sources(cfg)
	require.NoError(t, err)
	return sources
}

// serve starts a real HTTP server for ingest on pool with the test sources.
func serve(t testing.TB, pool *pgxpool.Pool, opts ingest.Options) *bundle {
	t.Helper()
	return serveConfig(t, pool, loadConfig(t), opts)
}

// serveConfig starts a real HTTP server for ingest of cfg's sources on pool.
func serveConfig(t testing.TB, pool *pgxpool.Pool, cfg *config.Config, opts ingest.Options) *bundle {
	t.Helper()
	logs := &testlog.Buffer{}
	logger := slogJSON(logs)
	rc, err := envelope.NewInsertClient(pool, logger)
	require.NoError(t, err)
	store := envelope.NewStore(pool, rc)
	srv, err := ingest.New(sourcesOf(t, cfg), store, logger, opts)
	require.NoError(t, err)
	return &bundle{pool: pool, url: newServer(t, srv), logs: logs, srv: srv, store: store}
}

func slogJSON(w io.Writer) *slog.Logger { return slog.New(slog.NewJSONHandler(w, nil)) }

// newServer serves h over real HTTP until the test ends and returns its URL.
func newServer(t testing.TB, h http.Handler) string {
	t.Helper()
	hs := httptest.NewServer(h)
	t.Cleanup(hs.Close)
	return hs.URL
}

func setup(t *testing.T) *bundle {
	t.Helper()
	return serve(t, pgtest.NewPool(t), ingest.Options{})
}

type response struct {
	code       int
	header     http.Header
	EnvelopeID int64  `json:"envelope_id"`
	Status     string `json:"status"`
	Error      string `json:"error"`
	raw        string
}

func (b *bundle) send(t *testing.T, source string, d webhooktest.Delivery) response {
	t.Helper()
	req, err := d.Request(context.Background(), b.url+"/webhooks/"+source)
	require.NoError(t, err)
	return do(t, req)
}

func do(t *testing.T, req *http.Request) response {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	r := response{code: resp.StatusCode, header: resp.Header, raw: string(raw)}
	require.NoError(t, json.Unmarshal(raw, &r), "body %q", raw)
	require.Equal(t, "application/json", resp.Header.Get("Content-Type"))
	return r
}

// stored returns (envelopes, River jobs, conflicts) in the database.
func (b *bundle) stored(t *testing.T) (int, int, int) {
	return pgtest.Count(t, b.pool, "SELECT count(*) FROM envelope"), pgtest.Count(t, b.pool, "SELECT count(*) FROM river_job"), pgtest.Count(t, b.pool, "SELECT count(*) FROM envelope_conflict")
}

func sample(providerName, id string) (string, webhooktest.Delivery) {
	switch providerName {
	case provider.Stripe:
		return "stripe", webhooktest.Delivery{Provider: provider.Stripe, Secret: stripeSecret, DeliveryID: id,
			Body: webhooktest.StripePayment(id, "pi_"+id, 2000, "usd")}
	case provider.GitHub:
		return "github", webhooktest.Delivery{Provider: provider.GitHub, Secret: githubSecret, DeliveryID: id, EventType: "push",
			Body: webhooktest.GitHubPushOf("refs/heads/main", id)}
	case provider.Shopify:
		return "shopify", webhooktest.Delivery{Provider: provider.Shopify, Secret: shopifySecret, DeliveryID: id, EventType: "orders/paid",
			Body: webhooktest.ShopifyOrderPaid(1001, "19.99", "USD"), Header: http.Header{"X-Shopify-Shop-Domain": {"demo.myshopify.com"}}}
	default:
		return "payments", webhooktest.Delivery{Provider: provider.Standard, Secret: standardSecret, DeliveryID: id,
			Body: webhooktest.StandardPayment("pay_"+id, "m_1", 1500, "EUR")}
	}
}

func TestAcceptedStoresEnvelopeAndJobForEachProvider(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, p := range provider.Names {
		t.Run(p, func(t *testing.T) {
			id := "evt_accept_" + p
			source, d := sample(p, id)
			r := b.send(t, source, d)
			require.Equal(t, http.StatusAccepted, r.code, r.raw)
			require.Equal(t, "accepted", r.Status)
			require.Positive(t, r.EnvelopeID)

			var (
				gotProvider, deliveryID, eventType, status string
				body                                       []byte
				headers                                    map[string]string
				sum                                        []byte
				payloadOK                                  bool
			)
			require.NoError(t, b.pool.QueryRow(context.Background(), `
				SELECT provider, delivery_id, event_type, status, body, headers, body_sha256,
				       payload = convert_from(body, 'UTF8')::jsonb
				  FROM envelope_with_body WHERE id = $1 AND source = $2`, r.EnvelopeID, source).
				Scan(&gotProvider, &deliveryID, &eventType, &status, &body, &headers, &sum, &payloadOK))
			require.Equal(t, p, gotProvider)
			require.Equal(t, id, deliveryID)
			require.NotEmpty(t, eventType)
			require.Equal(t, "pending", status)
			require.Equal(t, d.Body, body, "raw body must be byte-exact")
			require.True(t, payloadOK, "payload is the parsed body")
			for k, v := range headers {
				require.NotContains(t, v, "v1=", "header %s keeps a signature value", k)
				if strings.Contains(strings.ToLower(k), "signature") || strings.Contains(strings.ToLower(k), "hmac") {
					require.Equal(t, "[redacted]", v)
				}
			}
			require.Equal(t, 1, pgtest.Count(t, b.pool, `SELECT count(*) FROM river_job WHERE kind = 'process_envelope' AND (args->>'envelope_id')::bigint = $1 AND state = 'available'`, r.EnvelopeID))
		})
	}
}

func TestDuplicateSameBodyAnswers200AndStoresNothingNew(t *testing.T) {
	t.Parallel()
	b := setup(t)
	source, d := sample(provider.Standard, "msg_dup")
	first := b.send(t, source, d)
	require.Equal(t, http.StatusAccepted, first.code)
	// Its job finished (as a worker would): River's uniqueness no longer
	// covers it, so a duplicate that enqueued again would show as a new row.
	_, err := b.pool.Exec(context.Background(), `UPDATE river_job SET state = 'completed', finalized_at = now() WHERE (args->>'envelope_id')::bigint = $1`, first.EnvelopeID)
	require.NoError(t, err)
	// A provider retry: same id and body, new timestamp and signature.
	d.SignedAt = time.Now().Add(time.Second)
	second := b.send(t, source, d)
	require.Equal(t, http.StatusOK, second.code, second.raw)
	require.Equal(t, "duplicate", second.Status)
	require.Equal(t, first.EnvelopeID, second.EnvelopeID)
	env, jobs, conflicts := b.stored(t)
	require.Equal(t, [3]int{1, 1, 0}, [3]int{env, jobs, conflicts})
	require.Equal(t, 1, pgtest.Count(t, b.pool, "SELECT count(*) FROM envelope_duplicate WHERE envelope_id = $1", first.EnvelopeID))
}

// A verified same-id delivery with another body is the provider's own
// re-rendered resend: answered 200 duplicate (a non-2xx makes providers
// retry for days), the original untouched, the variant recorded, counted and
// logged at WARN without its body.
func TestSameDeliveryIDDifferentBodyIs200DuplicateAndRecorded(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	outcomes := map[labels.IngestOutcome]int{}
	b := serve(t, pgtest.NewPool(t), ingest.Options{Observe: func(_ string, outcome labels.IngestOutcome, _ string, _ time.Duration) {
		mu.Lock()
		defer mu.Unlock()
		outcomes[outcome]++
	}})
	source, d := sample(provider.GitHub, "7b2f0c1e-conflict")
	first := b.send(t, source, d)
	require.Equal(t, http.StatusAccepted, first.code)
	original := d.Body
	d.Body = webhooktest.GitHubPush("refs/heads/other")
	r := b.send(t, source, d)
	require.Equal(t, http.StatusOK, r.code, r.raw)
	require.Equal(t, "duplicate", r.Status)
	require.Equal(t, first.EnvelopeID, r.EnvelopeID)
	require.Empty(t, r.Error)
	env, jobs, conflicts := b.stored(t)
	require.Equal(t, [3]int{1, 1, 1}, [3]int{env, jobs, conflicts})
	// The original is untouched.
	require.Equal(t, 1, pgtest.Count(t, b.pool, `SELECT count(*) FROM envelope_with_body WHERE id = $1 AND body = $2`, first.EnvelopeID, original))
	require.Equal(t, 0, pgtest.Count(t, b.pool, `SELECT count(*) FROM envelope_duplicate`), "a conflict is not a duplicate")
	require.Equal(t, 1, pgtest.Count(t, b.pool, `SELECT count(*) FROM envelope_conflict WHERE envelope_id = $1 AND body = $2 AND body_sha256 = sha256($2)`, first.EnvelopeID, d.Body))

	mu.Lock()
	require.Equal(t, map[labels.IngestOutcome]int{labels.Accepted: 1, labels.Conflict: 1}, outcomes, "counted as a conflict, not a duplicate")
	mu.Unlock()
	var warned bool
	for line := range strings.SplitSeq(b.logs.String(), "\n") {
		if strings.Contains(line, `"level":"WARN"`) && strings.Contains(line, "different body") {
			warned = true
			require.Contains(t, line, fmt.Sprintf(`"envelope_id":%d`, first.EnvelopeID))
			require.NotContains(t, line, "refs/heads", "the log carries no body")
			require.NotContains(t, line, githubSecret)
		}
	}
	require.True(t, warned, "a WARN line for the conflict: %s", b.logs.String())
}

// A verified delivery with a delivery id is stored whatever its body: no
// event type, not JSON, empty, GitHub's form encoding. The raw bytes are the
// record; the event type is empty where there is none.
func TestVerifiedDeliveryIsStoredWhateverItsBody(t *testing.T) {
	t.Parallel()
	b := setup(t)
	form := "payload=" + url.QueryEscape(string(webhooktest.GitHubPush("refs/heads/main")))
	cases := []struct {
		name, source string
		d            webhooktest.Delivery
		contentType  string
		wantType     string
		wantPayload  string // "" for NULL
	}{
		{"standard without type", "payments", webhooktest.Delivery{Provider: provider.Standard, Secret: standardSecret, DeliveryID: "msg_notype",
			Body: []byte(`{"test": 2432232314}`)}, "", "", `{"test": 2432232314}`},
		{"standard not JSON", "payments", webhooktest.Delivery{Provider: provider.Standard, Secret: standardSecret, DeliveryID: "msg_text",
			Body: []byte("hello")}, "", "", ""},
		{"standard empty", "payments", webhooktest.Delivery{Provider: provider.Standard, Secret: standardSecret, DeliveryID: "msg_empty",
			Body: []byte{}}, "", "", ""},
		{"standard JSON jsonb refuses", "payments", webhooktest.Delivery{Provider: provider.Standard, Secret: standardSecret, DeliveryID: "msg_nul",
			Body: []byte(`{"type":"note","text":"\u0000"}`)}, "", "note", ""},
		{"shopify not JSON", "shopify", webhooktest.Delivery{Provider: provider.Shopify, Secret: shopifySecret, DeliveryID: "x5", EventType: "orders/paid",
			Body: []byte("id=1&total=2")}, "", "orders/paid", ""},
		{"github form-encoded", "github", webhooktest.Delivery{Provider: provider.GitHub, Secret: githubSecret, DeliveryID: "gh-form", EventType: "push",
			Body: []byte(form)}, "application/x-www-form-urlencoded", "push", string(webhooktest.GitHubPush("refs/heads/main"))},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			req, err := c.d.Request(context.Background(), b.url+"/webhooks/"+c.source)
			require.NoError(t, err)
			if c.contentType != "" {
				req.Header.Set("Content-Type", c.contentType)
			}
			r := do(t, req)
			require.Equal(t, http.StatusAccepted, r.code, r.raw)
			var (
				eventType string
				body      []byte
				payload   *string
			)
			require.NoError(t, b.pool.QueryRow(context.Background(),
				`SELECT event_type, body, payload::text FROM envelope_with_body WHERE id = $1`, r.EnvelopeID).Scan(&eventType, &body, &payload))
			require.Equal(t, c.wantType, eventType)
			require.Equal(t, c.d.Body, body, "raw body byte-exact")
			if c.wantPayload == "" {
				require.Nil(t, payload)
			} else {
				require.NotNil(t, payload)
				require.JSONEq(t, c.wantPayload, *payload)
			}
			require.Equal(t, 1, pgtest.Count(t, b.pool, `SELECT count(*) FROM river_job WHERE (args->>'envelope_id')::bigint = $1`, r.EnvelopeID))
		})
	}
}

func TestRejectionsStoreNothing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	big := webhooktest.Delivery{Provider: provider.Shopify, Secret: shopifySecret, DeliveryID: "big", EventType: "orders/paid",
		Body: []byte(`{"id":1,"note":"` + strings.Repeat("x", 3000) + `"}`)}
	cases := []struct {
		name   string
		source string
		build  func(t *testing.T) *http.Request
		code   int
	}{
		{"unknown source", "nope", func(t *testing.T) *http.Request {
			_, d := sample(provider.GitHub, "x1")
			req, err := d.Request(context.Background(), b.url+"/webhooks/nope")
			require.NoError(t, err)
			return req
		}, http.StatusNotFound},
		{"wrong secret", "stripe", func(t *testing.T) *http.Request {
			_, d := sample(provider.Stripe, "evt_wrong")
			d.Secret = "whsec_not_the_secret"
			req, err := d.Request(context.Background(), b.url+"/webhooks/stripe")
			require.NoError(t, err)
			return req
		}, http.StatusUnauthorized},
		{"missing signature", "github", func(t *testing.T) *http.Request {
			_, d := sample(provider.GitHub, "x2")
			req, err := d.Request(context.Background(), b.url+"/webhooks/github")
			require.NoError(t, err)
			req.Header.Del("X-Hub-Signature-256")
			return req
		}, http.StatusUnauthorized},
		{"tampered body", "shopify", func(t *testing.T) *http.Request {
			_, d := sample(provider.Shopify, "x3")
			h, err := d.Headers()
			require.NoError(t, err)
			body := bytes.Replace(d.Body, []byte("19.99"), []byte("99.99"), 1)
			req, err := http.NewRequest(http.MethodPost, b.url+"/webhooks/shopify", bytes.NewReader(body))
			require.NoError(t, err)
			req.Header = h
			return req
		}, http.StatusUnauthorized},
		{"stale timestamp", "payments", func(t *testing.T) *http.Request {
			_, d := sample(provider.Standard, "msg_stale")
			d.SignedAt = time.Now().Add(-6 * time.Minute)
			req, err := d.Request(context.Background(), b.url+"/webhooks/payments")
			require.NoError(t, err)
			return req
		}, http.StatusUnauthorized},
		{"future timestamp", "stripe", func(t *testing.T) *http.Request {
			_, d := sample(provider.Stripe, "evt_future")
			d.SignedAt = time.Now().Add(6 * time.Minute)
			req, err := d.Request(context.Background(), b.url+"/webhooks/stripe")
			require.NoError(t, err)
			return req
		}, http.StatusUnauthorized},
		{"over the limit with length", "shopify", func(t *testing.T) *http.Request {
			req, err := big.Request(context.Background(), b.url+"/webhooks/shopify")
			require.NoError(t, err)
			return req
		}, http.StatusRequestEntityTooLarge},
		{"over the limit chunked", "shopify", func(t *testing.T) *http.Request {
			req, err := big.Request(context.Background(), b.url+"/webhooks/shopify")
			require.NoError(t, err)
			req.ContentLength = -1 // no Content-Length: the limit applies while reading
			req.Body = io.NopCloser(bytes.NewReader(big.Body))
			return req
		}, http.StatusRequestEntityTooLarge},
		{"no delivery id", "github", func(t *testing.T) *http.Request {
			_, d := sample(provider.GitHub, "x4")
			req, err := d.Request(context.Background(), b.url+"/webhooks/github")
			require.NoError(t, err)
			req.Header.Del("X-GitHub-Delivery")
			return req
		}, http.StatusBadRequest},
		{"stripe body not JSON", "stripe", func(t *testing.T) *http.Request {
			d := webhooktest.Delivery{Provider: provider.Stripe, Secret: stripeSecret, Body: []byte("id=evt_1&type=charge.refunded")}
			req, err := d.Request(context.Background(), b.url+"/webhooks/stripe")
			require.NoError(t, err)
			return req
		}, http.StatusBadRequest},
		{"stripe body without id", "stripe", func(t *testing.T) *http.Request {
			d := webhooktest.Delivery{Provider: provider.Stripe, Secret: stripeSecret, Body: []byte(`{"object":"event","type":"charge.refunded"}`)}
			req, err := d.Request(context.Background(), b.url+"/webhooks/stripe")
			require.NoError(t, err)
			return req
		}, http.StatusBadRequest},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := do(t, tc.build(t))
			require.Equal(t, tc.code, r.code, r.raw)
			require.NotEmpty(t, r.Error)
			for _, s := range secrets {
				require.NotContains(t, r.raw, s)
			}
		})
	}
	env, jobs, conflicts := b.stored(t)
	require.Equal(t, [3]int{0, 0, 0}, [3]int{env, jobs, conflicts}, "a rejected delivery stores nothing")
	logs := b.logs.String()
	require.Contains(t, logs, `"outcome":"bad_signature"`)
	for _, s := range secrets {
		require.NotContains(t, logs, s, "logs must not contain a secret")
	}
}

func TestDatabaseDownIs503WithRetryAfter(t *testing.T) {
	t.Parallel()
	// A pool whose server refuses connections.
	pool, err := pg.Open(context.Background(), "postgres://postgres@127.0.0.1:1/none?sslmode=disable", pg.Options{ConnectTimeout: time.Second})
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	b := serve(t, pool, ingest.Options{StoreTimeout: 2 * time.Second})
	source, d := sample(provider.GitHub, "down-1")
	start := time.Now()
	r := b.send(t, source, d)
	require.Equal(t, http.StatusServiceUnavailable, r.code, r.raw)
	require.Equal(t, "5", r.header.Get("Retry-After"))
	require.Less(t, time.Since(start), 4*time.Second, "must answer before Shopify's 5 s")

	resp, err := http.Get(b.url + "/readyz")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	resp, err = http.Get(b.url + "/healthz")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
}

func TestOverloadedDatabaseTimesOutWith503AndStoresNothing(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	b := serve(t, pool, ingest.Options{StoreTimeout: 300 * time.Millisecond})
	ctx := context.Background()
	// Hold a lock that blocks every insert, as an overloaded database would.
	tx := pgtest.Tx(t, pool)
	_, err := tx.Exec(ctx, "LOCK TABLE envelope IN ACCESS EXCLUSIVE MODE")
	require.NoError(t, err)
	source, d := sample(provider.Stripe, "evt_slow")
	start := time.Now()
	r := b.send(t, source, d)
	elapsed := time.Since(start)
	require.NoError(t, tx.Rollback(ctx))
	require.Equal(t, http.StatusServiceUnavailable, r.code, r.raw)
	require.NotEmpty(t, r.header.Get("Retry-After"))
	require.Less(t, elapsed, 3*time.Second)
	env, jobs, _ := b.stored(t)
	require.Equal(t, [2]int{0, 0}, [2]int{env, jobs})
	// Once the database answers again, the sender's retry is stored.
	r = b.send(t, source, d)
	require.Equal(t, http.StatusAccepted, r.code, r.raw)
}

func TestConcurrentIdenticalDeliveriesStoreOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	source, d := sample(provider.Stripe, "evt_concurrent")
	const n = 50
	reqs := make([]*http.Request, n)
	for i := range reqs {
		req, err := d.Request(context.Background(), b.url+"/webhooks/"+source)
		require.NoError(t, err)
		reqs[i] = req
	}
	codes := make([]int, n)
	ids := make([]int64, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range reqs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			resp, err := http.DefaultClient.Do(reqs[i])
			if err != nil {
				codes[i] = -1
				return
			}
			defer resp.Body.Close()
			var body struct {
				EnvelopeID int64 `json:"envelope_id"`
			}
			_ = json.NewDecoder(resp.Body).Decode(&body)
			codes[i], ids[i] = resp.StatusCode, body.EnvelopeID
		}()
	}
	close(start)
	wg.Wait()
	accepted, dups := 0, 0
	for i, c := range codes {
		switch c {
		case http.StatusAccepted:
			accepted++
		case http.StatusOK:
			dups++
		default:
			t.Fatalf("request %d: status %d", i, c)
		}
		require.Equal(t, ids[0], ids[i])
	}
	require.Equal(t, 1, accepted)
	require.Equal(t, n-1, dups)
	env, jobs, _ := b.stored(t)
	require.Equal(t, [2]int{1, 1}, [2]int{env, jobs})
	require.Equal(t, n-1, pgtest.Count(t, b.pool, "SELECT count(*) FROM envelope_duplicate"))
}

func TestHealthAndReady(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for path, want := range map[string]int{"/healthz": 200, "/readyz": 200, "/nope": 404} {
		resp, err := http.Get(b.url + path)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, want, resp.StatusCode, path)
	}
	resp, err := http.Get(b.url + "/webhooks/stripe")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusMethodNotAllowed, resp.StatusCode)
}

func TestRotationAcceptsEitherSecret(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for i, secret := range []string{"whsec_b2xkLXNlY3JldC1vbGQtc2VjcmV0LTEyMzQ=", standardSecret} {
		_, d := sample(provider.Standard, fmt.Sprintf("msg_rot_%d", i))
		d.Secret = secret
		r := b.send(t, "payments", d)
		require.Equal(t, http.StatusAccepted, r.code, r.raw)
	}
}

// A provider's retry arriving while a worker holds the envelope (for its
// whole transaction: a slow forward, a paused process) is still answered
// 200 duplicate at once, not 503 after the store timeout.
func TestDuplicateWhileWorkerHoldsEnvelope(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	b := serve(t, pool, ingest.Options{StoreTimeout: time.Second})
	source, d := sample(provider.Stripe, "evt_held")
	first := b.send(t, source, d)
	require.Equal(t, http.StatusAccepted, first.code)
	ctx := context.Background()
	_, _, err := envelope.Lock(ctx, pgtest.Tx(t, pool), first.EnvelopeID) // what the worker does
	require.NoError(t, err)

	start := time.Now()
	r := b.send(t, source, d)
	require.Equal(t, http.StatusOK, r.code, r.raw)
	require.Less(t, time.Since(start), 900*time.Millisecond)
	d.Body = webhooktest.StripePayment("evt_held", "pi_other", 1, "usd")
	r = b.send(t, source, d)
	require.Equal(t, http.StatusOK, r.code, r.raw)
	require.Equal(t, "duplicate", r.Status)
}

// A client that stops sending mid-body gets a client error, not a 503 that
// would look like a database outage.
func TestTruncatedBodyIsAClientError(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, d := sample(provider.GitHub, "gh-truncated")
	h, err := d.Headers()
	require.NoError(t, err)
	conn, err := net.Dial("tcp", strings.TrimPrefix(b.url, "http://"))
	require.NoError(t, err)
	defer conn.Close()
	var req bytes.Buffer
	fmt.Fprintf(&req, "POST /webhooks/github HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n", len(d.Body)+100)
	for k, vs := range h {
		for _, v := range vs {
			fmt.Fprintf(&req, "%s: %s\r\n", k, v)
		}
	}
	req.WriteString("\r\n")
	req.Write(d.Body) // 100 bytes short
	_, err = conn.Write(req.Bytes())
	require.NoError(t, err)
	require.NoError(t, conn.(*net.TCPConn).CloseWrite())
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	env, jobs, _ := b.stored(t)
	require.Equal(t, [2]int{0, 0}, [2]int{env, jobs})
}

// New refuses a source it could not serve, naming it: the options are
// ingest's own (built by ingestconfig from a validated sources file), so
// this is a programming error caught at start, never a 500 per request.
func TestNewRefusesAnIncompleteSource(t *testing.T) {
	t.Parallel()
	v, err := provider.New(provider.Config{Provider: provider.Standard, Secrets: []string{standardSecret}})
	require.NoError(t, err)
	ok := ingest.Source{Provider: provider.Standard, Verifier: v, MaxBodyBytes: 1 << 20, CheckReplays: true, ReplayWindow: time.Hour}
	_, err = ingest.New(map[string]ingest.Source{"s": ok}, nil, slog.New(slog.DiscardHandler), ingest.Options{})
	require.NoError(t, err)
	for name, edit := range map[string]func(*ingest.Source){
		"no provider":                 func(s *ingest.Source) { s.Provider = "" },
		"no verifier":                 func(s *ingest.Source) { s.Verifier = nil },
		"no body limit":               func(s *ingest.Source) { s.MaxBodyBytes = 0 },
		"negative attempts":           func(s *ingest.Source) { s.MaxAttempts = -1 },
		"replay check without window": func(s *ingest.Source) { s.ReplayWindow = 0 },
	} {
		src := ok
		edit(&src)
		_, err := ingest.New(map[string]ingest.Source{"s": src}, nil, slog.New(slog.DiscardHandler), ingest.Options{})
		require.ErrorContains(t, err, `source "s": `, name)
	}
}
