package forward_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/inboxhq/inbox/internal/config"
	"github.com/inboxhq/inbox/internal/envelope"
	"github.com/inboxhq/inbox/internal/envelope/envelopetest"
	"github.com/inboxhq/inbox/internal/forward"
	"github.com/inboxhq/inbox/internal/handlers"
	"github.com/inboxhq/inbox/internal/labels"
	"github.com/inboxhq/inbox/internal/pgtest"
	"github.com/inboxhq/inbox/internal/provider"
	"github.com/inboxhq/inbox/internal/webhooktest"
)

// The brief's Standard Webhooks known-answer secret.
const forwardSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

// forwardBody is deliberately not in jsonb's canonical form (spacing, key
// order), so a re-encoded payload would not match it byte for byte.
const forwardBody = `{"type":"payment.succeeded",  "data":{"z":1, "a":"é"}}`

func forwardEnvelope() *envelope.Envelope {
	return &envelope.Envelope{
		ID: 42, Source: "payments", Provider: "standard", DeliveryID: "msg_2KWPBgLlAfxdpx2AI54pPJ85f4W",
		EventType: "payment.succeeded", Body: []byte(forwardBody),
		Headers: map[string]string{"Content-Type": "application/json; charset=utf-8"},
	}
}

// received is one request as the test receiver saw it, after verifying its
// signature.
type received struct {
	header   http.Header
	body     []byte
	delivery provider.Delivery
	err      error // signature or format error
	user     string
	password string
}

// receiver is a local HTTP server that verifies forwarded requests with the
// Standard Webhooks verifier and answers with respond.
type receiver struct {
	*httptest.Server
	mu   sync.Mutex
	reqs []received
}

func newReceiver(t *testing.T, respond http.HandlerFunc) *receiver {
	t.Helper()
	v, err := provider.New(provider.Config{Provider: provider.Standard, Secrets: []string{forwardSecret}})
	require.NoError(t, err)
	rc := &receiver{}
	rc.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		d, verr := v.Verify(r.Header, body, time.Now())
		user, pass, _ := r.BasicAuth()
		rc.mu.Lock()
		rc.reqs = append(rc.reqs, received{header: r.Header.Clone(), body: body, delivery: d, err: verr, user: user, password: pass})
		rc.mu.Unlock()
		if respond == nil {
			w.WriteHeader(http.StatusOK)
			return
		}
		respond(w, r)
	}))
	t.Cleanup(rc.Close)
	return rc
}

func (rc *receiver) requests() []received {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]received(nil), rc.reqs...)
}

func newForwarder(t *testing.T, url string, timeout time.Duration) *forward.Handler {
	t.Helper()
	f, err := forward.NewHandler(&forward.Destination{URL: url, Secret: forwardSecret, Timeout: timeout}, nil)
	require.NoError(t, err)
	return f
}

func TestForwardDelivers(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("ok ", 1000) // over 1 KiB: the result keeps the first 1 KiB
	rc := newReceiver(t, func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusAccepted)
		io.WriteString(w, long)
	})
	f := newForwarder(t, rc.URL+"/hooks/payments", 0)
	env := forwardEnvelope()

	// Twice, as a retry would: the receiver must see the same keys.
	for range 2 {
		res, err := f.Handle(context.Background(), handlers.Run{Envelope: env})
		require.NoError(t, err, "Handle")
		var got forward.Result
		require.NoError(t, json.Unmarshal(res, &got), "result %s", res)
		require.Equal(t, forward.Result{URL: rc.URL + "/hooks/payments", Status: http.StatusAccepted, Response: long[:1024]}, got)
	}

	reqs := rc.requests()
	require.Len(t, reqs, 2, "receiver requests")
	for _, r := range reqs {
		require.NoError(t, r.err, "the receiver verifies the signature")
		for name, want := range map[string]string{
			"Idempotency-Key":     "payments:msg_2KWPBgLlAfxdpx2AI54pPJ85f4W",
			"Content-Type":        "application/json; charset=utf-8",
			"User-Agent":          "inbox-forwarder/1",
			"X-Inbox-Source":      "payments",
			"X-Inbox-Event-Type":  "payment.succeeded",
			"X-Inbox-Envelope-Id": "42",
		} {
			assert.Equal(t, want, r.header.Get(name), name)
		}
		assert.Equal(t, "payments:msg_2KWPBgLlAfxdpx2AI54pPJ85f4W", r.delivery.DeliveryID, "verified delivery id")
		assert.Equal(t, "payment.succeeded", r.delivery.EventType, "verified event type")
		assert.Equal(t, forwardBody, string(r.body), "the original bytes")
	}
}

func TestForwardPayloadWhenBodyDropped(t *testing.T) {
	t.Parallel()
	rc := newReceiver(t, nil)
	f := newForwarder(t, rc.URL, 0)
	const stored = `{"data": {"a": "é", "z": 1}, "type": "payment.succeeded"}`
	env := forwardEnvelope().WithBodyPurged(json.RawMessage(stored)) // retention dropped the body
	env.Headers = map[string]string{}
	_, err := f.Handle(context.Background(), handlers.Run{Envelope: env})
	require.NoError(t, err, "Handle")
	r := rc.requests()[0]
	require.NoError(t, r.err, "verify")
	require.Equal(t, stored, string(r.body))
	require.Equal(t, "application/json", r.header.Get("Content-Type"))

	env = env.WithBodyPurged(nil)
	_, err = f.Handle(context.Background(), handlers.Run{Envelope: env})
	var pe *handlers.PermanentError
	require.ErrorAs(t, err, &pe, "no body and no payload")
}

// class names how the worker's outcome map treats an error.
type class string

const (
	classOK         class = "ok"
	classRetry      class = "retry"
	classRetryAfter class = "retry-after"
	classPermanent  class = "permanent"
)

func classOf(err error) (class, time.Duration) {
	var pe *handlers.PermanentError
	var re *handlers.RetryAfterError
	var ne *handlers.NotReadyError
	switch {
	case err == nil:
		return classOK, 0
	case errors.As(err, &pe):
		return classPermanent, 0
	case errors.As(err, &re):
		return classRetryAfter, re.After
	case errors.As(err, &ne):
		return "not-ready", 0
	default:
		return classRetry, 0
	}
}

// retryAfterIn30s, as a test's Retry-After, is resolved by the receiver when
// it answers, to the HTTP date 30 s later: a date computed when the table is
// built is already stale when a parallel subtest runs under load.
const retryAfterIn30s = "date+30s"

func TestForwardOutcomes(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name       string
		status     int
		retryAfter string
		body       string
		want       class
		after      [2]time.Duration // bounds of RetryAfterError.After
		inError    string           // the error text contains it
		cause      labels.Cause     // handlers.CauseOf(err)
	}{
		{name: "200", status: 200, want: classOK, cause: ""},
		{name: "204", status: 204, want: classOK, cause: ""},
		{name: "503 Retry-After seconds", status: 503, retryAfter: "7", want: classRetryAfter, after: [2]time.Duration{7 * time.Second, 7 * time.Second}, cause: "retry_after"},
		{name: "429 Retry-After seconds", status: 429, retryAfter: "120", want: classRetryAfter, after: [2]time.Duration{2 * time.Minute, 2 * time.Minute}, cause: "retry_after"},
		{name: "503 Retry-After date", status: 503, retryAfter: retryAfterIn30s, want: classRetryAfter, after: [2]time.Duration{25 * time.Second, 30 * time.Second}, cause: "retry_after"},
		{name: "503 Retry-After date past", status: 503, retryAfter: "Sun, 06 Nov 1994 08:49:37 GMT", want: classRetryAfter, cause: "retry_after"},
		{name: "429 no Retry-After", status: 429, want: classRetry, inError: "status 429", cause: "forward_4xx"},
		{name: "503 no Retry-After", status: 503, want: classRetry, cause: "forward_5xx"},
		{name: "503 bad Retry-After", status: 503, retryAfter: "soon", want: classRetry, cause: "forward_5xx"},
		{name: "500 Retry-After ignored", status: 500, retryAfter: "7", want: classRetry, cause: "forward_5xx"},
		{name: "408", status: 408, want: classRetry, cause: "forward_4xx"},
		{name: "500", status: 500, body: "boom", want: classRetry, inError: "status 500: boom", cause: "forward_5xx"},
		{name: "502", status: 502, want: classRetry, cause: "forward_5xx"},
		{name: "404", status: 404, body: "no such\nhook\x00", want: classPermanent, inError: "status 404: no such hook", cause: "forward_4xx"},
		{name: "400 long body", status: 400, body: strings.Repeat("x", 5000), want: classPermanent, inError: "status 400: xxx", cause: "forward_4xx"},
		{name: "422", status: 422, want: classPermanent, cause: "forward_4xx"},
		{name: "307 not followed", status: 307, want: classPermanent, inError: "redirect", cause: "forward_3xx"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			rc := newReceiver(t, func(w http.ResponseWriter, r *http.Request) {
				switch tt.retryAfter {
				case "":
				case retryAfterIn30s:
					w.Header().Set("Retry-After", time.Now().Add(30*time.Second).UTC().Format(http.TimeFormat))
				default:
					w.Header().Set("Retry-After", tt.retryAfter)
				}
				if tt.status == 307 {
					w.Header().Set("Location", "/elsewhere")
				}
				w.WriteHeader(tt.status)
				io.WriteString(w, tt.body)
			})
			_, err := newForwarder(t, rc.URL, 0).Handle(context.Background(), handlers.Run{Envelope: forwardEnvelope()})
			got, after := classOf(err)
			require.Equal(t, tt.want, got, "class of %v", err)
			assert.True(t, after >= tt.after[0] && after <= tt.after[1], "After = %s, want within %s", after, tt.after)
			assert.Equal(t, tt.cause, handlers.CauseOf(err), "cause of %v", err)
			if tt.inError != "" {
				assert.ErrorContains(t, err, tt.inError)
			}
			if err != nil {
				assert.LessOrEqual(t, len(err.Error()), 512, "the excerpt is bounded")
			}
			assert.Len(t, rc.requests(), 1, "receiver requests")
		})
	}
}

func TestForwardTimeout(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	rc := newReceiver(t, func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-release:
		}
	})
	t.Cleanup(func() { close(release) }) // runs before rc.Close

	start := time.Now()
	_, err := newForwarder(t, rc.URL, 100*time.Millisecond).Handle(context.Background(), handlers.Run{Envelope: forwardEnvelope()})
	c, _ := classOf(err)
	require.Equal(t, classRetry, c, "class of %v", err)
	assert.Equal(t, labels.CauseTimeout, handlers.CauseOf(err), "cause of %v", err)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	assert.ErrorContains(t, err, "no response within 100ms", "a deadline naming the timeout")
	assert.LessOrEqual(t, time.Since(start), 5*time.Second, "Handle with a 100ms timeout")
}

func TestForwardConnectionRefused(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL + "/hook?token=s3cr3t-token"
	srv.Close()
	_, err := newForwarder(t, url, 0).Handle(context.Background(), handlers.Run{Envelope: forwardEnvelope()})
	c, _ := classOf(err)
	require.Equal(t, classRetry, c, "class of %v", err)
	assert.NotContains(t, err.Error(), "s3cr3t-token", "the error shows the URL's query")
	assert.Equal(t, labels.CauseForwardUnreachable, handlers.CauseOf(err), "cause of %v", err)
}

// The URL's user info is used (basic auth) but never shown, nor its query,
// nor the secret.
func TestForwardRedacts(t *testing.T) {
	t.Parallel()
	var status atomic.Int32
	status.Store(http.StatusOK)
	rc := newReceiver(t, func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(int(status.Load())) })
	dest := strings.Replace(rc.URL, "http://", "http://hookuser:hook-pass-9@", 1) + "/in?token=tok-7781#frag"
	f := newForwarder(t, dest, 0)
	assert.Equal(t, rc.URL+"/in", f.URL())

	res, err := f.Handle(context.Background(), handlers.Run{Envelope: forwardEnvelope()})
	require.NoError(t, err)
	r := rc.requests()[0]
	assert.Equal(t, [2]string{"hookuser", "hook-pass-9"}, [2]string{r.user, r.password}, "basic auth")
	assert.NoError(t, r.err, "verify")
	status.Store(http.StatusForbidden)
	_, err = f.Handle(context.Background(), handlers.Run{Envelope: forwardEnvelope()})
	require.Error(t, err, "403 succeeded")
	for _, text := range []string{string(res), err.Error()} {
		for _, secret := range []string{"hook-pass-9", "tok-7781", "frag", forwardSecret, strings.TrimPrefix(forwardSecret, "whsec_")} {
			assert.NotContains(t, text, secret)
		}
	}
}

func TestNewHandlerRejects(t *testing.T) {
	t.Parallel()
	_, err := forward.NewHandler(nil, nil)
	assert.Error(t, err, "nil destination accepted")
	for name, dest := range map[string]forward.Destination{
		"relative url":   {URL: "/hook", Secret: forwardSecret},
		"ftp url":        {URL: "ftp://example.com/hook", Secret: forwardSecret},
		"no secret":      {URL: "http://example.com"},
		"bad secret":     {URL: "http://example.com", Secret: "whsec_not*base64!"},
		"long timeout":   {URL: "http://example.com", Secret: forwardSecret, Timeout: 2 * time.Minute},
		"bad mode":       {URL: "http://example.com", Secret: forwardSecret, Mode: "sometimes"},
		"empty pattern":  {URL: "http://example.com", Secret: forwardSecret, Events: []string{""}},
		"inner wildcard": {URL: "http://example.com", Secret: forwardSecret, Events: []string{"pay*.x"}},
	} {
		_, err := forward.NewHandler(&dest, nil)
		if !assert.Error(t, err, "%s: accepted", name) {
			continue
		}
		assert.NotContains(t, err.Error(), "not*base64", "%s: the error shows the secret", name)
	}

	// Defaults are the forwarder's; the caller's value is left alone.
	dest := &forward.Destination{URL: "https://example.com/hook", Secret: forwardSecret}
	_, err = forward.NewHandler(dest, nil)
	require.NoError(t, err)
	assert.Empty(t, dest.Mode, "NewHandler changed its argument: %+v", dest)
	assert.Zero(t, dest.Timeout, "NewHandler changed its argument: %+v", dest)
}

// recorder is a test handler that records the order of calls.
type recorder struct {
	mu    sync.Mutex
	calls []string
}

func (rec *recorder) add(s string) {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	rec.calls = append(rec.calls, s)
}

func (rec *recorder) got() string {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return strings.Join(rec.calls, ",")
}

func (rec *recorder) handler(name string, err error) handlers.Handler {
	return handlers.HandlerFunc(func(context.Context, handlers.Run) (json.RawMessage, error) {
		rec.add(name)
		if err != nil {
			return nil, err
		}
		return json.RawMessage(`{"handler":"` + name + `"}`), nil
	})
}

func TestRouterRoutes(t *testing.T) {
	t.Parallel()
	rec := &recorder{}
	reg := handlers.NewRegistry()
	reg.Register("standard", "payment.succeeded", rec.handler("builtin", nil))
	r := forward.New(reg)
	r.Add("payments", []string{"payment.*"}, forward.Besides, rec.handler("prefix", nil))
	r.Add("payments", []string{"refund.created", "dispute.*"}, forward.Besides, rec.handler("exact", nil))
	r.Add("payments", nil, "", rec.handler("all", nil)) // "": besides, the configuration's default
	r.Add("billing", []string{"*"}, forward.Instead, rec.handler("billing", nil))

	for _, tt := range []struct {
		source, event string
		want          string // the calls, in order; "" for no handler
	}{
		{"payments", "payment.succeeded", "builtin,prefix,all"}, // the built-in handler first
		{"payments", "payment.refunded", "prefix,all"},
		{"payments", "payments.x", "all"}, // "payment.*" is the prefix "payment."
		{"payments", "payment", "all"},
		{"payments", "refund.created", "exact,all"},
		{"payments", "refund.created.v2", "all"},
		{"payments", "dispute.opened", "exact,all"},
		{"billing", "payment.succeeded", "billing"}, // instead: no builtin
		{"other", "payment.succeeded", "builtin"},   // no source route: the registry's
		{"other", "payment.refunded", ""},
	} {
		rec.mu.Lock()
		rec.calls = nil
		rec.mu.Unlock()
		env := &envelope.Envelope{Source: tt.source, Provider: "standard", EventType: tt.event}
		h, ok := r.Route(env)
		if !ok {
			assert.Empty(t, tt.want, "%s %s: no handler", tt.source, tt.event)
			continue
		}
		_, err := h.Handle(context.Background(), handlers.Run{Envelope: env})
		require.NoError(t, err)
		assert.Equal(t, tt.want, rec.got(), "%s %s: calls", tt.source, tt.event)
	}

	// The registry decorated is left without source routes.
	_, ok := reg.Lookup("standard", "payment.refunded")
	assert.False(t, ok, "Lookup found a handler for an event only a source route takes")
	// Outbound: the sources with routes of their own.
	assert.Equal(t, [3]bool{true, true, false}, [3]bool{r.Outbound("payments"), r.Outbound("billing"), r.Outbound("other")},
		"Outbound of payments, billing, other")
	for name, add := range map[string]func(){
		"an inner wildcard": func() { r.Add("payments", []string{"a*b"}, forward.Besides, rec.handler("x", nil)) },
		"an unknown mode":   func() { r.Add("payments", nil, "sometimes", rec.handler("x", nil)) },
	} {
		assert.Panics(t, add, "Add with %s", name)
	}
}

func TestRouterResults(t *testing.T) {
	t.Parallel()
	env := &envelope.Envelope{Source: "s", Provider: "standard", EventType: "e"}
	fwd := handlers.HandlerFunc(func(context.Context, handlers.Run) (json.RawMessage, error) {
		return json.RawMessage(`{"url":"u","status":200}`), nil
	})
	for _, tt := range []struct {
		name    string
		builtin json.RawMessage // nil: none
		want    string
	}{
		{"object", json.RawMessage(`{"posted":true,"ledger_transaction_id":7}`), `{"forwarded":[{"url":"u","status":200}],"ledger_transaction_id":7,"posted":true}`},
		{"no builtin", nil, `{"forwarded":[{"url":"u","status":200}]}`},
		{"not an object", json.RawMessage(`"done"`), `{"forwarded":[{"url":"u","status":200}],"result":"done"}`},
		{"key taken", json.RawMessage(`{"forwarded":1}`), `{"forwarded":[{"url":"u","status":200}],"result":{"forwarded":1}}`},
	} {
		reg := handlers.NewRegistry()
		if tt.builtin != nil {
			reg.Register("standard", "e", handlers.HandlerFunc(func(context.Context, handlers.Run) (json.RawMessage, error) {
				return tt.builtin, nil
			}))
		}
		r := forward.New(reg)
		r.Add("s", nil, forward.Besides, fwd)
		h, _ := r.Route(env)
		res, err := h.Handle(context.Background(), handlers.Run{Envelope: env})
		if assert.NoError(t, err, tt.name) {
			assert.Equal(t, tt.want, string(res), tt.name)
		}
	}
}

// forwardConfig parses a sources file with one forwarding source,
// "payments", and one without, "other".
func forwardConfig(t *testing.T, forward string) *config.Config {
	t.Helper()
	cfg, err := config.Parse([]byte(`
sources:
  payments:
    provider: standard
    secrets: ["`+forwardSecret+`"]
    forward:
`+forward+`
  other:
    provider: standard
    secrets: ["`+forwardSecret+`"]
`), func(string) string { return "" })
	require.NoError(t, err)
	return cfg
}

func TestFromSources(t *testing.T) {
	t.Parallel()
	type bundle struct {
		rec     *recorder
		rc      *receiver
		builtin *handlers.Registry
		reg     *forward.Router
	}
	setup := func(t *testing.T, mode string, status int) *bundle {
		t.Helper()
		b := &bundle{rec: &recorder{}}
		b.rc = newReceiver(t, func(w http.ResponseWriter, r *http.Request) {
			b.rec.add("forward:" + r.URL.Path)
			w.WriteHeader(status)
		})
		b.builtin = handlers.NewRegistry()
		b.builtin.Register("standard", "payment.succeeded", b.rec.handler("builtin", nil))
		cfg := forwardConfig(t, `
      - url: `+b.rc.URL+`/one
        secret: `+forwardSecret+`
        events: ["payment.*"]
        mode: `+mode+`
      - url: `+b.rc.URL+`/two
        secret: `+forwardSecret+`
        events: ["payment.succeeded"]
        mode: `+mode)
		reg, err := forward.FromSources(b.builtin, cfg.Destinations(), b.rc.Client())
		require.NoError(t, err)
		b.reg = reg
		// The registry given is left as it was.
		h, ok := b.builtin.Route(forwardEnvelope())
		require.True(t, ok, "builtin lost its handler")
		_, err = h.Handle(context.Background(), handlers.Run{Envelope: forwardEnvelope()})
		require.NoError(t, err)
		require.Equal(t, "builtin", b.rec.got(), "the builtin registry routes to the built-in handler only")
		b.rec.mu.Lock()
		b.rec.calls = nil
		b.rec.mu.Unlock()
		return b
	}
	run := func(t *testing.T, b *bundle, env *envelope.Envelope) (json.RawMessage, error) {
		t.Helper()
		h, ok := b.reg.Route(env)
		require.True(t, ok, "no handler for %s %s", env.Source, env.EventType)
		return h.Handle(context.Background(), handlers.Run{Envelope: env})
	}

	t.Run("besides", func(t *testing.T) {
		t.Parallel()
		b := setup(t, "besides", http.StatusOK)
		res, err := run(t, b, forwardEnvelope())
		require.NoError(t, err)
		assert.Equal(t, "builtin,forward:/one,forward:/two", b.rec.got(), "calls: the built-in handler, then both forwards")
		var out struct {
			Handler   string           `json:"handler"`
			Forwarded []forward.Result `json:"forwarded"`
		}
		require.NoError(t, json.Unmarshal(res, &out))
		if assert.Equal(t, "builtin", out.Handler, "result %s", res) && assert.Len(t, out.Forwarded, 2, "result %s", res) {
			assert.Equal(t, b.rc.URL+"/one", out.Forwarded[0].URL, "result %s", res)
			assert.Equal(t, 200, out.Forwarded[1].Status, "result %s", res)
		}
	})

	t.Run("besides, no built-in handler", func(t *testing.T) {
		t.Parallel()
		b := setup(t, "besides", http.StatusOK)
		env := forwardEnvelope()
		env.EventType = "payment.refunded"
		_, err := run(t, b, env)
		require.NoError(t, err)
		assert.Equal(t, "forward:/one", b.rec.got(), "calls: the matching forward only")
	})

	t.Run("instead", func(t *testing.T) {
		t.Parallel()
		b := setup(t, "instead", http.StatusOK)
		res, err := run(t, b, forwardEnvelope())
		require.NoError(t, err)
		assert.Equal(t, "forward:/one,forward:/two", b.rec.got(), "calls: the forwards only")
		assert.NotContains(t, string(res), "builtin", "the result has the built-in handler's")
	})

	t.Run("forward fails", func(t *testing.T) {
		t.Parallel()
		b := setup(t, "besides", http.StatusBadGateway)
		_, err := run(t, b, forwardEnvelope())
		c, _ := classOf(err)
		require.Equal(t, classRetry, c, "class of %v", err)
		assert.Equal(t, "builtin,forward:/one", b.rec.got(), "calls: the built-in handler, then the first forward only")
	})

	t.Run("built-in handler fails", func(t *testing.T) {
		t.Parallel()
		b := setup(t, "besides", http.StatusOK)
		for _, berr := range []error{
			handlers.NotReady(errors.New("payment not posted yet")),
			handlers.Permanent(errors.New("bad payload")),
			errors.New("database gone"),
		} {
			b.rec.mu.Lock()
			b.rec.calls = nil
			b.rec.mu.Unlock()
			b.builtin.Register("standard", "payment.succeeded", b.rec.handler("builtin", berr)) // seen through the Router
			_, err := run(t, b, forwardEnvelope())
			require.ErrorIs(t, err, berr, "the built-in handler's error")
			assert.Equal(t, "builtin", b.rec.got(), "built-in error %v: calls, want no forward", berr)
		}
		assert.Empty(t, b.rc.requests(), "receiver requests")
	})

	t.Run("other source and unmatched events", func(t *testing.T) {
		t.Parallel()
		b := setup(t, "instead", http.StatusOK)
		env := forwardEnvelope()
		env.Source = "other"
		_, err := run(t, b, env)
		require.NoError(t, err)
		env = forwardEnvelope()
		env.EventType = "refund.created"
		_, ok := b.reg.Route(env)
		assert.False(t, ok, "an unmatched event without a built-in handler found one")
		_, ok = b.builtin.Lookup("standard", "payment.succeeded")
		assert.True(t, ok, "Lookup lost the built-in handler")
		assert.Equal(t, "builtin", b.rec.got(), "calls: the built-in handler only")
	})
}

func TestFromSourcesErrors(t *testing.T) {
	t.Parallel()
	cfg := forwardConfig(t, `
      - url: http://example.com/ok
        secret: `+forwardSecret)
	// Break the parsed destination, as code building a config could.
	cfg.Sources["payments"].Forward = append(cfg.Sources["payments"].Forward, &forward.Destination{URL: "http://example.com", Secret: "whsec_????"})
	_, err := forward.FromSources(handlers.Builtin(), cfg.Destinations(), nil)
	require.Error(t, err, "a bad secret was accepted")
	assert.ErrorContains(t, err, `source "payments": forward[1]`, "the source and index")
	assert.NotContains(t, err.Error(), "????", "not the secret")

	reg, err := forward.FromSources(handlers.Builtin(), nil, nil)
	require.NoError(t, err)
	_, ok := reg.Route(&envelope.Envelope{Source: "payments", Provider: "stripe", EventType: "charge.refunded"})
	assert.True(t, ok, "FromSources without sources lost the built-in handlers")
	assert.False(t, reg.Outbound("payments"), "FromSources without sources has outbound routes")
}

// In mode besides the built-in handler runs first, in the same transaction:
// a refund that arrives before its payment is not ready, and is not forwarded
// on each of its attempts; a forward that fails rolls the built-in handler's
// ledger posting back with it.
func TestForwardBesidesAfterBuiltinHandler(t *testing.T) {
	t.Parallel()
	ctx, pool := context.Background(), pgtest.NewPool(t)
	ledgerTransactions := func() int {
		t.Helper()
		return pgtest.Count(t, pool, "SELECT count(*) FROM ledger_transaction")
	}
	var status atomic.Int32
	status.Store(http.StatusOK)
	rc := newReceiver(t, func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(int(status.Load())) })
	reg, err := forward.FromSources(handlers.Builtin(), forwardConfig(t, `
      - url: `+rc.URL+`
        secret: `+forwardSecret).Destinations(), rc.Client())
	require.NoError(t, err)
	// run is one attempt, as the worker makes it: the handler in a
	// transaction that commits only when it succeeds.
	run := func(env *envelope.Envelope) error {
		t.Helper()
		h, ok := handlers.Resolve(reg, env)
		require.True(t, ok, "no handler for %s %s", env.Source, env.EventType)
		return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			_, err := h.Handle(ctx, handlers.Run{Tx: tx, Envelope: env})
			return err
		})
	}
	events := func() string {
		var got []string
		for _, r := range rc.requests() {
			got = append(got, r.header.Get("X-Inbox-Event-Type"))
		}
		return strings.Join(got, ",")
	}

	refund := newEnvelope(t, pool, "payments", "standard", "payment.refunded", webhooktest.StandardRefund("rfd_1", "pay_1", "merch_acme", 2345, "EUR"))
	for attempt := range 3 { // the refund snoozes, and is tried again
		c, _ := classOf(run(refund))
		require.Equal(t, class("not-ready"), c, "attempt %d of the refund", attempt+1)
	}
	require.Empty(t, events(), "forwarded while the refund was not ready")

	// A forward that fails undoes the payment's posting: retried as a whole.
	payment := newEnvelope(t, pool, "payments", "standard", "payment.succeeded", webhooktest.StandardPayment("pay_1", "merch_acme", 12345, "EUR"))
	status.Store(http.StatusBadGateway)
	c, _ := classOf(run(payment))
	require.Equal(t, classRetry, c, "payment with a failing forward")
	require.Zero(t, ledgerTransactions(), "ledger transactions after a failed forward")

	status.Store(http.StatusOK)
	require.NoError(t, run(payment), "payment")
	require.NoError(t, run(refund), "refund once the payment is posted")
	assert.Equal(t, "payment.succeeded,payment.succeeded,payment.refunded", events(), "forwarded events")
	assert.Equal(t, 2, ledgerTransactions(), "ledger transactions")
}

// newEnvelope stores a pending envelope for body in pool and returns it as
// the worker loads it.
func newEnvelope(t *testing.T, pool *pgxpool.Pool, source, provider, eventType string, body []byte) *envelope.Envelope {
	t.Helper()
	id := envelopetest.Insert(t, pool, envelopetest.Row{Source: source, Provider: provider, EventType: eventType, Body: body})
	env, err := envelope.Get(context.Background(), pool, id)
	require.NoError(t, err)
	return env
}
