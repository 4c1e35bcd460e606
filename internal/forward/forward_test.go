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
		EventType: "payment.succeeded", Body: []byte(forwardBody), Payload: json.RawMessage(forwardBody),
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
	if err != nil {
		t.Fatal(err)
	}
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
	f, err := forward.NewHandler(&config.Forward{URL: url, Secret: forwardSecret, Timeout: timeout}, nil)
	if err != nil {
		t.Fatal(err)
	}
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
		res, err := f.Handle(context.Background(), nil, env)
		if err != nil {
			t.Fatalf("Handle: %v", err)
		}
		var got forward.Result
		if err := json.Unmarshal(res, &got); err != nil {
			t.Fatalf("result %s: %v", res, err)
		}
		want := forward.Result{URL: rc.URL + "/hooks/payments", Status: http.StatusAccepted, Response: long[:1024]}
		if got != want {
			t.Fatalf("result = %+v, want %+v", got, want)
		}
	}

	reqs := rc.requests()
	if len(reqs) != 2 {
		t.Fatalf("receiver got %d requests, want 2", len(reqs))
	}
	for _, r := range reqs {
		if r.err != nil {
			t.Fatalf("receiver rejected the signature: %v", r.err)
		}
		for name, want := range map[string]string{
			"Idempotency-Key":     "payments:msg_2KWPBgLlAfxdpx2AI54pPJ85f4W",
			"Content-Type":        "application/json; charset=utf-8",
			"User-Agent":          "inbox-forwarder/1",
			"X-Inbox-Source":      "payments",
			"X-Inbox-Event-Type":  "payment.succeeded",
			"X-Inbox-Envelope-Id": "42",
		} {
			if got := r.header.Get(name); got != want {
				t.Errorf("%s = %q, want %q", name, got, want)
			}
		}
		if r.delivery.DeliveryID != "payments:msg_2KWPBgLlAfxdpx2AI54pPJ85f4W" || r.delivery.EventType != "payment.succeeded" {
			t.Errorf("verified delivery = %q %q", r.delivery.DeliveryID, r.delivery.EventType)
		}
		if string(r.body) != forwardBody {
			t.Errorf("body = %q, want the original bytes %q", r.body, forwardBody)
		}
	}
}

func TestForwardPayloadWhenBodyDropped(t *testing.T) {
	t.Parallel()
	rc := newReceiver(t, nil)
	f := newForwarder(t, rc.URL, 0)
	env := forwardEnvelope()
	env.Body = nil // retention dropped it
	env.Payload = json.RawMessage(`{"data": {"a": "é", "z": 1}, "type": "payment.succeeded"}`)
	env.Headers = map[string]string{}
	if _, err := f.Handle(context.Background(), nil, env); err != nil {
		t.Fatalf("Handle: %v", err)
	}
	r := rc.requests()[0]
	if r.err != nil || string(r.body) != string(env.Payload) || r.header.Get("Content-Type") != "application/json" {
		t.Fatalf("receiver got body %q, content type %q, verify error %v", r.body, r.header.Get("Content-Type"), r.err)
	}

	env.Payload = nil
	_, err := f.Handle(context.Background(), nil, env)
	var pe *handlers.PermanentError
	if !errors.As(err, &pe) {
		t.Fatalf("no body and no payload: err = %v, want permanent", err)
	}
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
			_, err := newForwarder(t, rc.URL, 0).Handle(context.Background(), nil, forwardEnvelope())
			got, after := classOf(err)
			if got != tt.want {
				t.Fatalf("error %v is %s, want %s", err, got, tt.want)
			}
			if after < tt.after[0] || after > tt.after[1] {
				t.Errorf("After = %s, want within %s", after, tt.after)
			}
			if c := handlers.CauseOf(err); c != tt.cause {
				t.Errorf("cause of %v is %q, want %q", err, c, tt.cause)
			}
			if tt.inError != "" && !strings.Contains(err.Error(), tt.inError) {
				t.Errorf("error %q does not contain %q", err, tt.inError)
			}
			if err != nil && len(err.Error()) > 512 {
				t.Errorf("error is %d bytes long: the excerpt is not bounded", len(err.Error()))
			}
			if n := len(rc.requests()); n != 1 {
				t.Errorf("receiver got %d requests, want 1", n)
			}
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
	_, err := newForwarder(t, rc.URL, 100*time.Millisecond).Handle(context.Background(), nil, forwardEnvelope())
	if c, _ := classOf(err); c != classRetry {
		t.Fatalf("error %v is %s, want %s", err, c, classRetry)
	}
	if c := handlers.CauseOf(err); c != labels.CauseTimeout {
		t.Errorf("cause of %v is %q, want timeout", err, c)
	}
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "no response within 100ms") {
		t.Errorf("error %q: want a deadline naming the timeout", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Handle took %s with a 100ms timeout", d)
	}
}

func TestForwardConnectionRefused(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL + "/hook?token=s3cr3t-token"
	srv.Close()
	_, err := newForwarder(t, url, 0).Handle(context.Background(), nil, forwardEnvelope())
	if c, _ := classOf(err); c != classRetry {
		t.Fatalf("error %v is %s, want %s", err, c, classRetry)
	}
	if strings.Contains(err.Error(), "s3cr3t-token") {
		t.Errorf("error %q shows the URL's query", err)
	}
	if c := handlers.CauseOf(err); c != labels.CauseForwardUnreachable {
		t.Errorf("cause of %v is %q, want forward_unreachable", err, c)
	}
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
	if want := rc.URL + "/in"; f.URL() != want {
		t.Errorf("URL() = %q, want %q", f.URL(), want)
	}

	res, err := f.Handle(context.Background(), nil, forwardEnvelope())
	if err != nil {
		t.Fatal(err)
	}
	r := rc.requests()[0]
	if r.user != "hookuser" || r.password != "hook-pass-9" || r.err != nil {
		t.Errorf("receiver got basic auth %q:%q, verify error %v", r.user, r.password, r.err)
	}
	status.Store(http.StatusForbidden)
	_, err = f.Handle(context.Background(), nil, forwardEnvelope())
	if err == nil {
		t.Fatal("403 succeeded")
	}
	for _, text := range []string{string(res), err.Error()} {
		for _, secret := range []string{"hook-pass-9", "tok-7781", "frag", forwardSecret, strings.TrimPrefix(forwardSecret, "whsec_")} {
			if strings.Contains(text, secret) {
				t.Errorf("%q shows %q", text, secret)
			}
		}
	}
}

func TestNewHandlerRejects(t *testing.T) {
	t.Parallel()
	if _, err := forward.NewHandler(nil, nil); err == nil {
		t.Error("nil destination accepted")
	}
	for name, dest := range map[string]config.Forward{
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
		if err == nil {
			t.Errorf("%s: accepted", name)
			continue
		}
		if strings.Contains(err.Error(), "not*base64") {
			t.Errorf("%s: error %q shows the secret", name, err)
		}
	}

	// Defaults are the forwarder's; the caller's value is left alone.
	dest := &config.Forward{URL: "https://example.com/hook", Secret: forwardSecret}
	if _, err := forward.NewHandler(dest, nil); err != nil {
		t.Fatal(err)
	}
	if dest.Mode != "" || dest.Timeout != 0 {
		t.Errorf("NewHandler changed its argument: %+v", dest)
	}
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
	return handlers.HandlerFunc(func(context.Context, pgx.Tx, *envelope.Envelope) (json.RawMessage, error) {
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
	r.Add("payments", []string{"payment.*"}, config.ForwardBesides, rec.handler("prefix", nil))
	r.Add("payments", []string{"refund.created", "dispute.*"}, config.ForwardBesides, rec.handler("exact", nil))
	r.Add("payments", nil, "", rec.handler("all", nil)) // "": besides, the configuration's default
	r.Add("billing", []string{"*"}, config.ForwardInstead, rec.handler("billing", nil))

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
			if tt.want != "" {
				t.Errorf("%s %s: no handler, want %s", tt.source, tt.event, tt.want)
			}
			continue
		}
		if _, err := h.Handle(context.Background(), nil, env); err != nil {
			t.Fatal(err)
		}
		if got := rec.got(); got != tt.want {
			t.Errorf("%s %s: calls %q, want %q", tt.source, tt.event, got, tt.want)
		}
	}

	// The registry decorated is left without source routes.
	if _, ok := reg.Lookup("standard", "payment.refunded"); ok {
		t.Error("Lookup found a handler for an event only a source route takes")
	}
	// Outbound: the sources with routes of their own.
	if !r.Outbound("payments") || !r.Outbound("billing") || r.Outbound("other") {
		t.Errorf("Outbound = payments %v, billing %v, other %v; want true, true, false",
			r.Outbound("payments"), r.Outbound("billing"), r.Outbound("other"))
	}
	for name, add := range map[string]func(){
		"an inner wildcard": func() { r.Add("payments", []string{"a*b"}, config.ForwardBesides, rec.handler("x", nil)) },
		"an unknown mode":   func() { r.Add("payments", nil, "sometimes", rec.handler("x", nil)) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("Add with %s did not panic", name)
				}
			}()
			add()
		}()
	}
}

func TestRouterResults(t *testing.T) {
	t.Parallel()
	env := &envelope.Envelope{Source: "s", Provider: "standard", EventType: "e"}
	fwd := handlers.HandlerFunc(func(context.Context, pgx.Tx, *envelope.Envelope) (json.RawMessage, error) {
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
			reg.Register("standard", "e", handlers.HandlerFunc(func(context.Context, pgx.Tx, *envelope.Envelope) (json.RawMessage, error) {
				return tt.builtin, nil
			}))
		}
		r := forward.New(reg)
		r.Add("s", nil, config.ForwardBesides, fwd)
		h, _ := r.Route(env)
		res, err := h.Handle(context.Background(), nil, env)
		if err != nil || string(res) != tt.want {
			t.Errorf("%s: result %s, %v; want %s", tt.name, res, err, tt.want)
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
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func TestFromConfig(t *testing.T) {
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
		reg, err := forward.FromConfig(b.builtin, cfg, b.rc.Client())
		if err != nil {
			t.Fatal(err)
		}
		b.reg = reg
		// The registry given is left as it was.
		if h, ok := b.builtin.Route(forwardEnvelope()); !ok {
			t.Fatal("builtin lost its handler")
		} else if _, err := h.Handle(context.Background(), nil, forwardEnvelope()); err != nil || b.rec.got() != "builtin" {
			t.Fatalf("builtin registry routes to %q (%v), want the built-in handler only", b.rec.got(), err)
		}
		b.rec.mu.Lock()
		b.rec.calls = nil
		b.rec.mu.Unlock()
		return b
	}
	run := func(t *testing.T, b *bundle, env *envelope.Envelope) (json.RawMessage, error) {
		t.Helper()
		h, ok := b.reg.Route(env)
		if !ok {
			t.Fatalf("no handler for %s %s", env.Source, env.EventType)
		}
		return h.Handle(context.Background(), nil, env)
	}

	t.Run("besides", func(t *testing.T) {
		t.Parallel()
		b := setup(t, "besides", http.StatusOK)
		res, err := run(t, b, forwardEnvelope())
		if err != nil {
			t.Fatal(err)
		}
		if got := b.rec.got(); got != "builtin,forward:/one,forward:/two" {
			t.Errorf("calls %q, want the built-in handler, then both forwards", got)
		}
		var out struct {
			Handler   string           `json:"handler"`
			Forwarded []forward.Result `json:"forwarded"`
		}
		if err := json.Unmarshal(res, &out); err != nil {
			t.Fatal(err)
		}
		if out.Handler != "builtin" || len(out.Forwarded) != 2 || out.Forwarded[0].URL != b.rc.URL+"/one" || out.Forwarded[1].Status != 200 {
			t.Errorf("result %s", res)
		}
	})

	t.Run("besides, no built-in handler", func(t *testing.T) {
		t.Parallel()
		b := setup(t, "besides", http.StatusOK)
		env := forwardEnvelope()
		env.EventType = "payment.refunded"
		if _, err := run(t, b, env); err != nil {
			t.Fatal(err)
		}
		if got := b.rec.got(); got != "forward:/one" {
			t.Errorf("calls %q, want the matching forward only", got)
		}
	})

	t.Run("instead", func(t *testing.T) {
		t.Parallel()
		b := setup(t, "instead", http.StatusOK)
		res, err := run(t, b, forwardEnvelope())
		if err != nil {
			t.Fatal(err)
		}
		if got := b.rec.got(); got != "forward:/one,forward:/two" {
			t.Errorf("calls %q, want the forwards only", got)
		}
		if strings.Contains(string(res), "builtin") {
			t.Errorf("result %s has the built-in handler's", res)
		}
	})

	t.Run("forward fails", func(t *testing.T) {
		t.Parallel()
		b := setup(t, "besides", http.StatusBadGateway)
		_, err := run(t, b, forwardEnvelope())
		if c, _ := classOf(err); c != classRetry {
			t.Fatalf("error %v is %s, want %s", err, c, classRetry)
		}
		if got := b.rec.got(); got != "builtin,forward:/one" {
			t.Errorf("calls %q, want the built-in handler, then the first forward only", got)
		}
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
			if !errors.Is(err, berr) {
				t.Fatalf("error %v, want the built-in handler's %v", err, berr)
			}
			if got := b.rec.got(); got != "builtin" {
				t.Errorf("built-in error %v: calls %q, want no forward", berr, got)
			}
		}
		if n := len(b.rc.requests()); n != 0 {
			t.Errorf("receiver got %d requests, want none", n)
		}
	})

	t.Run("other source and unmatched events", func(t *testing.T) {
		t.Parallel()
		b := setup(t, "instead", http.StatusOK)
		env := forwardEnvelope()
		env.Source = "other"
		if _, err := run(t, b, env); err != nil {
			t.Fatal(err)
		}
		env = forwardEnvelope()
		env.EventType = "refund.created"
		if _, ok := b.reg.Route(env); ok {
			t.Error("an unmatched event without a built-in handler found one")
		}
		if _, ok := b.builtin.Lookup("standard", "payment.succeeded"); !ok {
			t.Error("Lookup lost the built-in handler")
		}
		if got := b.rec.got(); got != "builtin" {
			t.Errorf("calls %q, want the built-in handler only", got)
		}
	})
}

func TestFromConfigErrors(t *testing.T) {
	t.Parallel()
	cfg := forwardConfig(t, `
      - url: http://example.com/ok
        secret: `+forwardSecret)
	// Break the parsed destination, as code building a config could.
	cfg.Sources["payments"].Forward = append(cfg.Sources["payments"].Forward, &config.Forward{URL: "http://example.com", Secret: "whsec_????"})
	_, err := forward.FromConfig(handlers.Builtin(), cfg, nil)
	if err == nil {
		t.Fatal("a bad secret was accepted")
	}
	if msg := err.Error(); !strings.Contains(msg, `source "payments": forward[1]`) || strings.Contains(msg, "????") {
		t.Errorf("error %q: want the source and index, not the secret", msg)
	}

	reg, err := forward.FromConfig(handlers.Builtin(), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := reg.Route(&envelope.Envelope{Source: "payments", Provider: "stripe", EventType: "charge.refunded"}); !ok {
		t.Error("FromConfig without config lost the built-in handlers")
	}
	if reg.Outbound("payments") {
		t.Error("FromConfig without config has outbound routes")
	}
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
	reg, err := forward.FromConfig(handlers.Builtin(), forwardConfig(t, `
      - url: `+rc.URL+`
        secret: `+forwardSecret), rc.Client())
	if err != nil {
		t.Fatal(err)
	}
	// run is one attempt, as the worker makes it: the handler in a
	// transaction that commits only when it succeeds.
	run := func(env *envelope.Envelope) error {
		t.Helper()
		h, ok := handlers.Resolve(reg, env)
		if !ok {
			t.Fatalf("no handler for %s %s", env.Source, env.EventType)
		}
		return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			_, err := h.Handle(ctx, tx, env)
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
		if c, _ := classOf(run(refund)); c != "not-ready" {
			t.Fatalf("attempt %d of the refund: %s, want not-ready", attempt+1, c)
		}
	}
	if got := events(); got != "" {
		t.Fatalf("forwarded %q while the refund was not ready, want nothing", got)
	}

	// A forward that fails undoes the payment's posting: retried as a whole.
	payment := newEnvelope(t, pool, "payments", "standard", "payment.succeeded", webhooktest.StandardPayment("pay_1", "merch_acme", 12345, "EUR"))
	status.Store(http.StatusBadGateway)
	if c, _ := classOf(run(payment)); c != classRetry {
		t.Fatalf("payment with a failing forward: %s, want %s", c, classRetry)
	}
	if n := ledgerTransactions(); n != 0 {
		t.Fatalf("ledger transactions after a failed forward = %d, want 0", n)
	}

	status.Store(http.StatusOK)
	if err := run(payment); err != nil {
		t.Fatalf("payment: %v", err)
	}
	if err := run(refund); err != nil {
		t.Fatalf("refund once the payment is posted: %v", err)
	}
	if got := events(); got != "payment.succeeded,payment.succeeded,payment.refunded" {
		t.Errorf("forwarded events = %q, want payment.succeeded,payment.succeeded,payment.refunded", got)
	}
	if n := ledgerTransactions(); n != 2 {
		t.Errorf("ledger transactions = %d, want 2", n)
	}
}

// newEnvelope stores a pending envelope for body in pool and returns it as
// the worker loads it.
func newEnvelope(t *testing.T, pool *pgxpool.Pool, source, provider, eventType string, body []byte) *envelope.Envelope {
	t.Helper()
	id := envelopetest.Insert(t, pool, envelopetest.Row{Source: source, Provider: provider, EventType: eventType, Body: body})
	env, err := envelope.Get(context.Background(), pool, id)
	if err != nil {
		t.Fatal(err)
	}
	return env
}
