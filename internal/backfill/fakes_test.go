package backfill_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/inboxhq/inbox/internal/backfill"
	"github.com/inboxhq/inbox/internal/config"
	"github.com/inboxhq/inbox/internal/envelope"
	"github.com/inboxhq/inbox/internal/ingest"
	"github.com/inboxhq/inbox/internal/ingest/ingestconfig"
	"github.com/inboxhq/inbox/internal/pg"
	"github.com/inboxhq/inbox/internal/pgtest"
	"github.com/inboxhq/inbox/internal/provider"
	"github.com/inboxhq/inbox/internal/webhooktest"
)

const (
	stripeKey     = "sk_test_51FakeKeyForBackfillTests0000secret"
	stripeSecret  = "whsec_backfill_test_secret_0123456789"
	githubToken   = "ghp_FakeTokenForBackfillTests000000000000"
	githubSecret  = "backfill-github-secret-0123456789"
	shopifySecret = "backfill-shopify-secret-0123456789"
)

// stripeRequest is one request the fake Stripe API received.
type stripeRequest struct {
	Query   url.Values
	Account string
	Auth    string
	Version string
}

// fakeStripe serves GET /v1/events from events (newest first) as Stripe
// documents it: a list object of at most limit events created in
// [created[gte], created[lte]], after starting_after, with has_more.
type fakeStripe struct {
	t      *testing.T
	mu     sync.Mutex
	events map[string][]json.RawMessage // by Stripe-Account ("" for the platform)
	reqs   []stripeRequest
	// FaultFunc, when set, may answer request n (0-based) itself: it
	// returns true when it did.
	FaultFunc func(n int, q url.Values, w http.ResponseWriter) bool
	// PageFunc, when set, is called with a page's events before it is
	// answered.
	PageFunc func(page []json.RawMessage)
	// Verbatim serves the events as recorded, whatever created[gte] and
	// created[lte] ask (as stripe-mock does): the client must drop what
	// lies outside its window itself.
	Verbatim bool
	srv      *httptest.Server
}

func newFakeStripe(t *testing.T, events []json.RawMessage) *fakeStripe {
	f := &fakeStripe{t: t, events: map[string][]json.RawMessage{"": events}}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeStripe) requests() []stripeRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.reqs)
}

func stripeError(w http.ResponseWriter, status int, typ, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	b, _ := json.MarshalIndent(map[string]any{"error": map[string]any{"type": typ, "message": msg}}, "", "  ")
	w.Write(b) //nolint:errcheck
}

func (f *fakeStripe) serve(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	f.mu.Lock()
	n := len(f.reqs)
	f.reqs = append(f.reqs, stripeRequest{Query: q, Account: r.Header.Get("Stripe-Account"), Auth: r.Header.Get("Authorization"), Version: r.Header.Get("Stripe-Version")})
	events := f.events[r.Header.Get("Stripe-Account")]
	f.mu.Unlock()
	if f.FaultFunc != nil && f.FaultFunc(n, q, w) {
		return
	}
	if r.Method != http.MethodGet || r.URL.Path != "/v1/events" {
		stripeError(w, http.StatusNotFound, "invalid_request_error", "Unrecognized request URL ("+r.Method+": "+r.URL.Path+").")
		return
	}
	if r.Header.Get("Authorization") != "Bearer "+stripeKey {
		stripeError(w, http.StatusUnauthorized, "invalid_request_error", "Invalid API Key provided: sk_test_****cret")
		return
	}
	limit, _ := strconv.Atoi(q.Get("limit"))
	if limit < 1 || limit > 100 {
		limit = 10
	}
	gte, _ := strconv.ParseInt(q.Get("created[gte]"), 10, 64)
	lte, err := strconv.ParseInt(q.Get("created[lte]"), 10, 64)
	if err != nil {
		lte = 1 << 62
	}
	start := 0
	if after := q.Get("starting_after"); after != "" {
		start = -1
		for i, ev := range events {
			if eventID(f.t, ev) == after {
				start = i + 1
			}
		}
		if start < 0 {
			stripeError(w, http.StatusBadRequest, "invalid_request_error", "No such event: '"+after+"'")
			return
		}
	}
	var page []json.RawMessage
	hasMore := false
	for _, ev := range events[start:] {
		c := eventCreated(f.t, ev)
		if !f.Verbatim && (c < gte || c > lte) || !typeMatches(eventType(f.t, ev), q) {
			continue
		}
		if len(page) == limit {
			hasMore = true
			break
		}
		page = append(page, ev)
	}
	if f.PageFunc != nil {
		f.PageFunc(page)
	}
	if page == nil {
		page = []json.RawMessage{}
	}
	b, err := json.MarshalIndent(map[string]any{"object": "list", "data": page, "has_more": hasMore, "url": "/v1/events"}, "", "  ")
	require.NoError(f.t, err)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Request-Id", "req_fake"+strconv.Itoa(n))
	w.Write(b) //nolint:errcheck
}

func eventID(t *testing.T, ev json.RawMessage) string {
	var e struct {
		ID string `json:"id"`
	}
	require.NoError(t, json.Unmarshal(ev, &e))
	return e.ID
}

// typeMatches applies Stripe's type (a "*" wildcard) and types[] filters.
func typeMatches(typ string, q url.Values) bool {
	if p := q.Get("type"); p != "" {
		ok, _ := path.Match(p, typ)
		return ok
	}
	if ts := q["types[]"]; len(ts) > 0 {
		return slices.Contains(ts, typ)
	}
	return true
}

func eventType(t *testing.T, ev json.RawMessage) string {
	var e struct {
		Type string `json:"type"`
	}
	require.NoError(t, json.Unmarshal(ev, &e))
	return e.Type
}

func eventCreated(t *testing.T, ev json.RawMessage) int64 {
	var e struct {
		Created int64 `json:"created"`
	}
	require.NoError(t, json.Unmarshal(ev, &e))
	return e.Created
}

// stripeEvents returns n payment_intent.succeeded events in Stripe's
// documented event shape, newest first, created one minute apart ending
// at newest.
func stripeEvents(n int, prefix string, newest time.Time) []json.RawMessage {
	out := make([]json.RawMessage, n)
	for i := range n {
		id := fmt.Sprintf("evt_%s%04d", prefix, n-i)
		out[i] = json.RawMessage(fmt.Sprintf(`{
  "id": %q,
  "object": "event",
  "api_version": "2024-06-20",
  "created": %d,
  "data": {
    "object": {
      "id": "pi_%s%04d",
      "object": "payment_intent",
      "amount": %d,
      "amount_received": %d,
      "currency": "usd",
      "status": "succeeded"
    }
  },
  "livemode": false,
  "pending_webhooks": 1,
  "request": {
    "id": null,
    "idempotency_key": null
  },
  "type": "payment_intent.succeeded"
}`, id, newest.Add(-time.Duration(i)*time.Minute).Unix(), prefix, n-i, 100+i, 100+i))
	}
	return out
}

// bundle is what a backfill test needs: a database, ingest serving the
// configured sources on it, and a Runner storing as the admin role (the
// CLI's), its sleeps recorded.
type bundle struct {
	pool      *pgxpool.Pool
	cfg       *config.Config
	ingestURL string
	runner    *backfill.Runner
	mu        sync.Mutex
	sleeps    []time.Duration
	logs      *bytes.Buffer
}

const sourcesYAML = `
sources:
  stripe:
    provider: stripe
    secrets: ["${STRIPE_SECRET}"]
    backfill:
      api_key: ${STRIPE_API_KEY}
      api_url: ${STRIPE_API_URL}
      requests_per_second: 1000
  github:
    provider: github
    secrets: ["${GITHUB_SECRET}"]
    backfill:
      token: ${GITHUB_TOKEN}
      repo: octo/repo
      hook_id: 42
      api_url: ${GITHUB_API_URL}
      requests_per_second: 1000
  shop:
    provider: shopify
    secrets: ["${SHOPIFY_SECRET}"]
`

func setup(t *testing.T, stripeURL, githubURL string) *bundle {
	t.Helper()
	ctx := context.Background()
	dbURL := pgtest.NewURL(t)
	pool, err := pg.Open(ctx, dbURL, pg.Options{MaxConns: 8})
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	if stripeURL == "" {
		stripeURL = "http://127.0.0.1:1"
	}
	if githubURL == "" {
		githubURL = "http://127.0.0.1:1"
	}
	env := map[string]string{
		"STRIPE_SECRET": stripeSecret, "STRIPE_API_KEY": stripeKey, "STRIPE_API_URL": stripeURL,
		"GITHUB_SECRET": githubSecret, "GITHUB_TOKEN": githubToken, "GITHUB_API_URL": githubURL,
		"SHOPIFY_SECRET": shopifySecret,
	}
	cfg, err := config.Parse([]byte(sourcesYAML), func(k string) string { return env[k] })
	require.NoError(t, err)

	// ingest, as the ingest role.
	ingestPool, err := pg.Open(ctx, pgtest.RoleURL(t, dbURL, pgtest.RoleIngest), pg.Options{MaxConns: 8})
	require.NoError(t, err)
	t.Cleanup(ingestPool.Close)
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	rc, err := envelope.NewInsertClient(ingestPool, logger)
	require.NoError(t, err)
	// No shedding: these tests send hundreds of webhooks at once on a
	// machine the whole suite loads, to test the race with the backfill;
	// refusals under load are ingest's own tests'.
	sources, err := ingestconfig.Sources(cfg)
	require.NoError(t, err)
	srv, err := ingest.New(sources, envelope.NewStore(ingestPool, rc), logger, ingest.Options{ShedAfter: -1})
	require.NoError(t, err)
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)

	// backfill, as the admin role (worker backfill).
	adminPool, err := pg.Open(ctx, pgtest.RoleURL(t, dbURL, pgtest.RoleAdmin), pg.Options{MaxConns: 4})
	require.NoError(t, err)
	t.Cleanup(adminPool.Close)
	arc, err := envelope.NewInsertClient(adminPool, logger)
	require.NoError(t, err)
	b := &bundle{pool: pool, cfg: cfg, ingestURL: hs.URL, logs: &bytes.Buffer{}}
	b.runner = &backfill.Runner{
		Store:  envelope.NewStore(adminPool, arc),
		Logger: slog.New(slog.NewTextHandler(&lockedWriter{mu: &b.mu, w: b.logs}, nil)),
		Client: backfill.ClientOptions{
			MaxRetries: 3,
			BackoffMin: time.Millisecond,
			SleepFunc: func(ctx context.Context, d time.Duration) error {
				b.mu.Lock()
				b.sleeps = append(b.sleeps, d)
				b.mu.Unlock()
				return ctx.Err()
			},
		},
	}
	return b
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func (b *bundle) recordedSleeps() []time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.sleeps)
}

// sendStripe posts ev to ingest as a signed Stripe webhook (compact JSON:
// other bytes than the API's rendering) and returns the status code.
func (b *bundle) sendStripe(t *testing.T, ev json.RawMessage) int {
	t.Helper()
	var body bytes.Buffer
	require.NoError(t, json.Compact(&body, ev))
	d := webhooktest.Delivery{Provider: provider.Stripe, Secret: stripeSecret, Body: body.Bytes()}
	req, err := d.Request(context.Background(), b.ingestURL+"/webhooks/stripe")
	if err != nil {
		t.Error(err)
		return 0
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Error(err)
		return 0
	}
	defer resp.Body.Close()
	io.Copy(io.Discard, resp.Body) //nolint:errcheck
	return resp.StatusCode
}

type storedRow struct {
	ID         int64
	DeliveryID string
	Origin     string
	RunID      *int64
	Body       []byte
	Jobs       int
	Dups       int
}

// envelopes returns the source's envelopes by delivery id, with how many
// process_envelope jobs and duplicate rows each has.
func (b *bundle) envelopes(t *testing.T, source string) map[string]storedRow {
	t.Helper()
	rows, err := b.pool.Query(context.Background(), `
		SELECT e.id, e.delivery_id, e.origin, e.backfill_run_id, e.body,
		       (SELECT count(*) FROM river_job j WHERE j.kind = 'process_envelope' AND (j.args->>'envelope_id')::bigint = e.id),
		       (SELECT count(*) FROM envelope_duplicate d WHERE d.envelope_id = e.id)
		  FROM envelope_with_body e WHERE e.source = $1`, source)
	require.NoError(t, err)
	out := map[string]storedRow{}
	for rows.Next() {
		var r storedRow
		require.NoError(t, rows.Scan(&r.ID, &r.DeliveryID, &r.Origin, &r.RunID, &r.Body, &r.Jobs, &r.Dups))
		_, dup := out[r.DeliveryID]
		require.False(t, dup, "delivery %s stored twice", r.DeliveryID)
		out[r.DeliveryID] = r
	}
	require.NoError(t, rows.Err())
	return out
}

type runRow struct {
	Source, Provider, Actor, Status string
	DryRun                          bool
	Since, Until                    time.Time
	Listed, Found, Stored           int
	Cursor, Error                   *string
	Finished                        bool
}

func (b *bundle) run(t *testing.T, id int64) runRow {
	t.Helper()
	var r runRow
	require.NoError(t, b.pool.QueryRow(context.Background(), `
		SELECT source, provider, actor, status, dry_run, since, until, listed, found, stored, cursor, error, finished_at IS NOT NULL
		  FROM backfill_run WHERE id = $1`, id).
		Scan(&r.Source, &r.Provider, &r.Actor, &r.Status, &r.DryRun, &r.Since, &r.Until, &r.Listed, &r.Found, &r.Stored, &r.Cursor, &r.Error, &r.Finished))
	return r
}
