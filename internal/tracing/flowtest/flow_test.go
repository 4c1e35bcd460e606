// Package flowtest checks one trace from an ingest request to the ledger,
// across the envelope row, with the real ingest handler, worker and replay
// against PostgreSQL and an in-memory span exporter. It is a package of its
// own because tracing is process-wide state: the other packages' tests run
// with tracing off.
package flowtest

import (
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/inboxhq/inbox/internal/admin"
	"github.com/inboxhq/inbox/internal/config"
	"github.com/inboxhq/inbox/internal/envelope"
	"github.com/inboxhq/inbox/internal/forward"
	"github.com/inboxhq/inbox/internal/handlers"
	"github.com/inboxhq/inbox/internal/ingest"
	"github.com/inboxhq/inbox/internal/ingest/ingestconfig"
	"github.com/inboxhq/inbox/internal/pgtest"
	"github.com/inboxhq/inbox/internal/tracing"
	"github.com/inboxhq/inbox/internal/webhooktest"
	"github.com/inboxhq/inbox/internal/worker"
)

const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

const sourcesYAML = `
sources:
  payments:
    provider: standard
    secrets: ["` + secret + `"]
  fwd:
    provider: standard
    secrets: ["` + secret + `"]
    forward:
      - url: ${TARGET}/hook?token=s3cr3t-query
        secret: ` + secret + `
`

// exporter receives every span of this test binary, synchronously at End.
var exporter = tracetest.NewInMemoryExporter()

func TestMain(m *testing.M) {
	tracing.Use(sdktrace.NewTracerProvider(sdktrace.WithSyncer(exporter)))
	m.Run()
}

// allowedKeys is every attribute key a span may carry: no body, header
// value, secret or signature can hide under another name.
var allowedKeys = []string{
	"http.request.method", "http.route", "http.response.status_code",
	"inbox.source", "inbox.request_id", "inbox.outcome", "inbox.envelope_id", "inbox.duplicate",
	"inbox.provider", "inbox.event_type", "inbox.job_id", "inbox.attempt", "inbox.replayed", "inbox.savepoints", "inbox.committed",
	"url.full",
	"ledger.kind", "ledger.transaction_id", "ledger.created", "ledger.deferred", "ledger.payment_not_posted",
	"inbox.replay_batch_id", "inbox.matched", "inbox.skipped", "inbox.batches", "inbox.interrupted",
}

type fixture struct {
	pool   *pgxpool.Pool
	ingest string
	store  *envelope.Store
	// forwarded receives the traceparent header of each forwarded request.
	forwarded chan string
}

func setup(t *testing.T) *fixture {
	t.Helper()
	url := pgtest.NewURL(t)
	ctx := context.Background()
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	pool, err := pgxpool.New(ctx, url)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	rc, err := envelope.NewInsertClient(pool, logger)
	require.NoError(t, err)
	store := envelope.NewStore(pool, rc)
	forwarded := make(chan string, 16)
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		forwarded <- r.Header.Get("traceparent")
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(target.Close)
	cfg, err := config.Parse([]byte(sourcesYAML), func(k string) string {
		if k == "TARGET" {
			return target.URL
		}
		return ""
	})
	require.NoError(t, err)
	registry, err := forward.FromSources(handlers.Builtin(), cfg.Destinations(), target.Client())
	require.NoError(t, err)
	sources, err := ingestconfig.Sources(cfg)
	require.NoError(t, err)
	srv, err := ingest.New(sources, store, logger, ingest.Options{})
	require.NoError(t, err)
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)

	wp, err := pgxpool.New(ctx, pgtest.RoleURL(t, url, pgtest.RoleWorker))
	require.NoError(t, err)
	t.Cleanup(wp.Close)
	client, err := worker.NewClient(wp, registry, worker.Config{
		MaxWorkers: 2, FetchCooldown: 5 * time.Millisecond, FetchPollInterval: 20 * time.Millisecond,
	}, logger)
	require.NoError(t, err)
	require.NoError(t, client.Start(ctx))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = client.Stop(ctx)
	})
	return &fixture{pool: pool, ingest: hs.URL, store: store, forwarded: forwarded}
}

// waitSpans polls the exporter until want finds what it needs among the
// spans of traceID, and returns them.
func waitSpans(t *testing.T, traceID trace.TraceID, want func([]tracetest.SpanStub) bool) []tracetest.SpanStub {
	t.Helper()
	var spans []tracetest.SpanStub
	pgtest.Eventually(t, 20*time.Second, fmt.Sprintf("the spans of trace %s to complete", traceID), func() (bool, string) {
		spans = nil
		for _, s := range exporter.GetSpans() {
			if s.SpanContext.TraceID() == traceID {
				spans = append(spans, s)
			}
		}
		if want(spans) {
			return true, ""
		}
		var names []string
		for _, s := range spans {
			names = append(names, s.Name)
		}
		return false, fmt.Sprintf("have %v", names)
	})
	return spans
}

// newTraceID returns a random trace id: the exporter is shared by every
// test (and every -count run) of the process, and spans are told apart by
// trace.
func newTraceID(t *testing.T) trace.TraceID {
	t.Helper()
	var id trace.TraceID
	_, err := rand.Read(id[:])
	require.NoError(t, err)
	return id
}

func named(spans []tracetest.SpanStub, name string) []tracetest.SpanStub {
	var out []tracetest.SpanStub
	for _, s := range spans {
		if s.Name == name {
			out = append(out, s)
		}
	}
	return out
}

func attr(s tracetest.SpanStub, key string) (string, bool) {
	for _, kv := range s.Attributes {
		if string(kv.Key) == key {
			return kv.Value.Emit(), true
		}
	}
	return "", false
}

// committedAttempts counts the trace's committed envelope.process spans.
func committedAttempts(spans []tracetest.SpanStub) int {
	n := 0
	for _, s := range named(spans, "envelope.process") {
		if v, _ := attr(s, "inbox.committed"); v == "true" {
			n++
		}
	}
	return n
}

func waitStatus(t *testing.T, pool *pgxpool.Pool, id int64, want envelope.Status) *envelope.Envelope {
	t.Helper()
	var e *envelope.Envelope
	pgtest.Eventually(t, 20*time.Second, fmt.Sprintf("envelope %d to be %s", id, want), func() (bool, string) {
		var err error
		e, err = envelope.Get(context.Background(), pool, id)
		require.NoError(t, err)
		return e.Status == want, fmt.Sprintf("envelope %d is %s, want %s", id, e.Status, want)
	})
	return e
}

// TestTraceFromRequestToLedger sends a signed payment with a traceparent to
// the real ingest handler and follows it: the envelope keeps the request's
// trace context, the worker's attempt joins the trace under the request's
// span, the handler and the ledger posting are its children; a replay's
// attempt joins the same trace and the replay's own span links to it.
func TestTraceFromRequestToLedger(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := context.Background()

	traceID := newTraceID(t)
	senderSpan, _ := trace.SpanIDFromHex("00f067aa0ba902b7")
	body := webhooktest.StandardPayment("pay_trace_1", "m_trace", 1250, "EUR")
	req, err := webhooktest.Delivery{Provider: "standard", Secret: secret, DeliveryID: "msg_trace_1", Body: body}.
		Request(ctx, f.ingest+"/webhooks/payments")
	require.NoError(t, err)
	req.Header.Set("traceparent", "00-"+traceID.String()+"-"+senderSpan.String()+"-01")
	signature := req.Header.Get("webhook-signature")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.Equal(t, http.StatusAccepted, resp.StatusCode)

	var id int64
	var stored *string
	require.NoError(t, f.pool.QueryRow(ctx, `SELECT id, trace_context FROM envelope WHERE delivery_id = 'msg_trace_1'`).Scan(&id, &stored))
	require.NotNil(t, stored, "the envelope keeps the request's trace context")
	require.True(t, strings.HasPrefix(*stored, "00-"+traceID.String()+"-"), "stored %q", *stored)

	spans := waitSpans(t, traceID, func(s []tracetest.SpanStub) bool {
		return committedAttempts(s) == 1 && len(named(s, "ledger.post")) == 1 && len(named(s, "POST /webhooks/{source}")) == 1
	})
	server := named(spans, "POST /webhooks/{source}")[0]
	require.Equal(t, trace.SpanKindServer, server.SpanKind)
	require.Equal(t, senderSpan, server.Parent.SpanID(), "the request's span is a child of the sender's")
	require.True(t, server.Parent.IsRemote())
	require.Equal(t, "00-"+traceID.String()+"-"+server.SpanContext.SpanID().String()+"-01", *stored, "the envelope keeps the request span's context")
	st, _ := attr(server, "http.response.status_code")
	require.Equal(t, "202", st)
	out, _ := attr(server, "inbox.outcome")
	require.Equal(t, "accepted", out)

	store := named(spans, "envelope.store")
	require.Len(t, store, 1)
	require.Equal(t, server.SpanContext.SpanID(), store[0].Parent.SpanID())

	var first tracetest.SpanStub
	for _, s := range named(spans, "envelope.process") {
		if v, _ := attr(s, "inbox.committed"); v == "true" {
			first = s
		}
	}
	require.Equal(t, server.SpanContext.SpanID(), first.Parent.SpanID(), "the attempt's parent is the stored request span")
	require.True(t, first.Parent.IsRemote(), "a remote parent: it came through the envelope row")
	o, _ := attr(first, "inbox.outcome")
	require.Equal(t, "done", o)

	handler := named(spans, "handler")
	require.NotEmpty(t, handler)
	require.Equal(t, first.SpanContext.SpanID(), handler[len(handler)-1].Parent.SpanID())
	post := named(spans, "ledger.post")[0]
	require.Equal(t, handler[len(handler)-1].SpanContext.SpanID(), post.Parent.SpanID(), "the posting is the handler's child")
	created, _ := attr(post, "ledger.created")
	require.Equal(t, "true", created)

	// Replay: the new attempt joins the same trace, under the request's span.
	waitStatus(t, f.pool, id, envelope.StatusDone)
	res, err := admin.Replay(ctx, f.pool, jobInserter(t, f), admin.ReplayRequest{
		Filter: admin.Filter{IDs: []int64{id}}, Actor: "tester", Reason: "trace test"})
	require.NoError(t, err)
	require.Equal(t, 1, res.Replayed)
	spans = waitSpans(t, traceID, func(s []tracetest.SpanStub) bool { return committedAttempts(s) == 2 })
	var replayed []tracetest.SpanStub
	for _, s := range named(spans, "envelope.process") {
		if v, _ := attr(s, "inbox.replayed"); v == "true" {
			replayed = append(replayed, s)
		}
	}
	require.NotEmpty(t, replayed, "the replayed attempt is in the request's trace")
	require.Equal(t, server.SpanContext.SpanID(), replayed[len(replayed)-1].Parent.SpanID())

	var replaySpan *tracetest.SpanStub
	for _, s := range exporter.GetSpans() {
		if b, _ := attr(s, "inbox.replay_batch_id"); s.Name == "admin.replay" && b == res.BatchID {
			replaySpan = &s
		}
	}
	require.NotNil(t, replaySpan, "the replay command has a span")
	require.NotEqual(t, traceID, replaySpan.SpanContext.TraceID(), "the replay is a trace of its own")
	require.True(t, slices.ContainsFunc(replaySpan.Links, func(l sdktrace.Link) bool {
		return l.SpanContext.TraceID() == traceID && l.SpanContext.SpanID() == server.SpanContext.SpanID()
	}), "the replay links to the envelope's trace: %+v", replaySpan.Links)

	// No span carries the body, a header, a secret or a signature.
	for _, s := range append(spans, *replaySpan) {
		for _, kv := range s.Attributes {
			require.Contains(t, allowedKeys, string(kv.Key), "span %s", s.Name)
			v := kv.Value.Emit()
			for _, bad := range []string{secret, signature, string(body), "pay_trace_1", "msg_trace_1"} {
				require.NotContains(t, v, bad, "span %s attribute %s", s.Name, kv.Key)
			}
		}
	}
}

// jobInserter is a River insert client for replay.
func jobInserter(t *testing.T, f *fixture) admin.JobInserter {
	t.Helper()
	rc, err := envelope.NewInsertClient(f.pool, slog.New(slog.NewTextHandler(io.Discard, nil)))
	require.NoError(t, err)
	return rc
}

// TestForwardJoinsTrace: a forward is a client span under the handler's,
// and the target receives a traceparent naming it, so the target's own
// spans join the request's trace. The span's URL has no query.
func TestForwardJoinsTrace(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := context.Background()
	traceID := newTraceID(t)
	body := webhooktest.StandardPayment("pay_fwd_1", "m_fwd", 990, "USD")
	req, err := webhooktest.Delivery{Provider: "standard", Secret: secret, DeliveryID: "msg_fwd_1", Body: body}.
		Request(ctx, f.ingest+"/webhooks/fwd")
	require.NoError(t, err)
	req.Header.Set("traceparent", "00-"+traceID.String()+"-10f067aa0ba902b7-01")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.Equal(t, http.StatusAccepted, resp.StatusCode)

	var got string
	select {
	case got = <-f.forwarded:
	case <-time.After(20 * time.Second):
		t.Fatal("nothing forwarded")
	}
	spans := waitSpans(t, traceID, func(s []tracetest.SpanStub) bool {
		return committedAttempts(s) == 1 && len(named(s, "forward")) == 1
	})
	fwd := named(spans, "forward")[0]
	require.Equal(t, trace.SpanKindClient, fwd.SpanKind)
	require.Equal(t, "00-"+traceID.String()+"-"+fwd.SpanContext.SpanID().String()+"-01", got, "the target gets the forward span's traceparent")
	handler := named(spans, "handler")
	require.True(t, slices.ContainsFunc(handler, func(h tracetest.SpanStub) bool { return h.SpanContext.SpanID() == fwd.Parent.SpanID() }),
		"the forward is the handler's child")
	u, _ := attr(fwd, "url.full")
	require.NotContains(t, u, "s3cr3t-query")
	st, _ := attr(fwd, "http.response.status_code")
	require.Equal(t, "200", st)
	for _, s := range spans {
		for _, kv := range s.Attributes {
			require.Contains(t, allowedKeys, string(kv.Key), "span %s", s.Name)
			require.NotContains(t, kv.Value.Emit(), secret)
		}
	}
}
