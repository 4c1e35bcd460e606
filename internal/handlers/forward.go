package handlers

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/inboxhq/inbox/internal/config"
	"github.com/inboxhq/inbox/internal/envelope"
	"github.com/inboxhq/inbox/internal/labels"
	"github.com/inboxhq/inbox/internal/provider"
	"github.com/inboxhq/inbox/internal/tracing"
)

// Forwarding sends a verified delivery on to an internal HTTP endpoint. It
// is configured per source (config.Source.Forward), so it lives in a
// per-source layer of the Registry, which LookupEnvelope combines with the
// (provider, event type) routes.
//
// In mode Besides the built-in handler runs first and the forwards only once
// it succeeded, so an envelope the built-in handler is not ready for (a
// refund ahead of its payment, snoozed and tried again for hours) is not
// forwarded on every attempt. Delivery is still at least once: a forward that
// succeeded is sent again when the rest of the attempt (a later destination,
// the commit) fails and the envelope is retried, or when it is replayed. Every
// request of one envelope carries the same Idempotency-Key and webhook-id,
// "<source>:<delivery id>", for the receiver to deduplicate on.

// SourceMode says how a source route combines with the handler registered
// for the envelope's (provider, event type).
type SourceMode int

const (
	// Besides runs the (provider, event type) handler if there is one,
	// then, once it succeeded, the source routes.
	Besides SourceMode = iota
	// Instead runs only the source routes.
	Instead
)

// String returns the configuration name of m ("besides", "instead").
func (m SourceMode) String() string {
	switch m {
	case Besides:
		return config.ForwardBesides
	case Instead:
		return config.ForwardInstead
	default:
		return "SourceMode(" + strconv.Itoa(int(m)) + ")"
	}
}

// sourceRoute is one handler of a source, for the event types matching
// any of its patterns (all of them when there are none).
type sourceRoute struct {
	events  []string
	mode    SourceMode
	handler Handler
}

func (sr sourceRoute) matches(eventType string) bool {
	if len(sr.events) == 0 {
		return true
	}
	for _, p := range sr.events {
		if matchEvent(p, eventType) {
			return true
		}
	}
	return false
}

// matchEvent reports whether eventType matches pattern: "*" matches every
// event type, "prefix*" those that start with prefix ("payment.*" matches
// "payment.succeeded" but not "payment" nor "payments.x"), anything else
// only itself.
func matchEvent(pattern, eventType string) bool {
	if prefix, ok := strings.CutSuffix(pattern, "*"); ok {
		return strings.HasPrefix(eventType, prefix)
	}
	return pattern == eventType
}

// RegisterSource routes source's envelopes whose event type matches any of
// events (every event type when events is empty) to h, besides or instead of
// the (provider, event type) routes; see LookupEnvelope. Patterns are exact event
// types or a prefix with a trailing "*" ("payment.*"). Routes of one source
// run in the order they were registered. It panics on an empty source, an
// invalid pattern, an unknown mode or a nil handler, which are programming
// errors.
func (r *Registry) RegisterSource(source string, events []string, mode SourceMode, h Handler) {
	if source == "" || h == nil || (mode != Besides && mode != Instead) {
		panic("handlers: RegisterSource needs a source, a mode and a handler")
	}
	for _, p := range events {
		if err := config.CheckEventPattern(p); err != nil {
			panic("handlers: RegisterSource: " + err.Error())
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sources[source] = append(r.sources[source], sourceRoute{events: append([]string(nil), events...), mode: mode, handler: h})
}

// LookupEnvelope returns the handler for env: when routes registered with
// RegisterSource for env.Source match env.EventType, a handler that runs,
// unless one of them is Instead, the (provider, event type) handler (see
// Lookup) if there is one, and then the matching routes in order. All run in
// the same call and transaction; it stops at the first error and returns it,
// so the attempt rolls back as a whole (ledger postings included) and is
// retried: a failing built-in handler means no route runs, a failing route
// undoes the built-in handler's effects. Its result is the
// (provider, event type) handler's JSON object with the source routes'
// results added as an array under "forwarded" (or {"forwarded": [...],
// "result": ...} when that result is not an object or already has the key).
// When no source route matches it is Lookup(env.Provider, env.EventType).
// false means no handler: the envelope is to be ignored.
func (r *Registry) LookupEnvelope(env *envelope.Envelope) (Handler, bool) {
	h, ok := r.lookupEnvelope(env)
	if !ok {
		return nil, false
	}
	r.mu.RLock()
	account := r.accounts[env.Source]
	r.mu.RUnlock()
	if account != "" {
		h = withAccount{h: h, account: account}
	}
	if env.Provider == provider.Shopify {
		if id := header(env, shopifyEventIDHeader); id != "" {
			h = shopifyEventOnce{h: h, eventID: id}
		}
	}
	return h, true
}

func (r *Registry) lookupEnvelope(env *envelope.Envelope) (Handler, bool) {
	r.mu.RLock()
	var matched []Handler
	instead := false
	for _, sr := range r.sources[env.Source] {
		if sr.matches(env.EventType) {
			matched = append(matched, sr.handler)
			instead = instead || sr.mode == Instead
		}
	}
	r.mu.RUnlock()
	if len(matched) == 0 {
		return r.Lookup(env.Provider, env.EventType)
	}
	c := &combined{routes: matched}
	if !instead {
		c.builtin, _ = r.Lookup(env.Provider, env.EventType)
	}
	return c, true
}

// HasSourceRoutes reports whether source has routes of its own
// (forwarding): its handlers make outbound calls, so the worker runs its
// envelopes one per transaction rather than batched.
func (r *Registry) HasSourceRoutes(source string) bool {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return len(r.sources[source]) > 0
}

// combined runs the (provider, event type) handler, then a source's matching
// routes.
type combined struct {
	builtin Handler // nil: none, or mode Instead
	routes  []Handler
}

func (c *combined) Handle(ctx context.Context, tx pgx.Tx, env *envelope.Envelope) (json.RawMessage, error) {
	var res json.RawMessage
	if c.builtin != nil {
		var err error
		if res, err = c.builtin.Handle(ctx, tx, env); err != nil {
			return nil, err
		}
	}
	forwarded := make([]json.RawMessage, 0, len(c.routes))
	for _, h := range c.routes {
		fres, err := h.Handle(ctx, tx, env)
		if err != nil {
			return nil, err
		}
		if len(fres) == 0 {
			fres = json.RawMessage("null")
		}
		forwarded = append(forwarded, fres)
	}
	return mergeForwarded(forwarded, res)
}

// mergeForwarded adds forwarded under "forwarded" to result, a JSON object,
// so that queries on the built-in handler's result keep working.
func mergeForwarded(forwarded []json.RawMessage, result json.RawMessage) (json.RawMessage, error) {
	fw, err := json.Marshal(forwarded)
	if err != nil {
		return nil, fmt.Errorf("encode result: %w", err)
	}
	if len(bytes.TrimSpace(result)) == 0 {
		return marshal(map[string]json.RawMessage{"forwarded": fw})
	}
	var obj map[string]json.RawMessage
	if json.Unmarshal(result, &obj) == nil && obj != nil {
		if _, taken := obj["forwarded"]; !taken {
			obj["forwarded"] = fw
			return marshal(obj)
		}
	}
	return marshal(map[string]json.RawMessage{"forwarded": fw, "result": result})
}

// WithForwarding returns a copy of r (r is left as it is) in which each
// source of cfg with Forward destinations has one route per destination,
// registered with RegisterSource in configuration order: a Forwarder using
// client (see NewForwarder), for the destination's Events, Besides or
// Instead by its Mode. Its errors name the source and the destination's
// index, never its secret.
func WithForwarding(r *Registry, cfg *config.Config, client *http.Client) (*Registry, error) {
	out := r.clone()
	if cfg == nil {
		return out, nil
	}
	for _, name := range cfg.Names() {
		src := cfg.Sources[name]
		if src == nil {
			continue
		}
		for i, dest := range src.Forward {
			f, err := NewForwarder(dest, client)
			if err != nil {
				return nil, fmt.Errorf("source %q: forward[%d]: %w", name, i, err)
			}
			mode := Besides
			if f.dest.Mode == config.ForwardInstead {
				mode = Instead
			}
			out.RegisterSource(name, f.dest.Events, mode, f)
		}
	}
	return out, nil
}

// clone returns a Registry with r's routes, source routes included.
func (r *Registry) clone() *Registry {
	out := NewRegistry()
	r.mu.RLock()
	defer r.mu.RUnlock()
	for k, h := range r.handlers {
		out.handlers[k] = h
	}
	for s, routes := range r.sources {
		out.sources[s] = append([]sourceRoute(nil), routes...)
	}
	for s, a := range r.accounts {
		out.accounts[s] = a
	}
	return out
}

// Forwarding request limits.
const (
	// ForwardUserAgent is the User-Agent of forwarding requests.
	ForwardUserAgent = "inbox-forwarder/1"
	// forwardResponseLimit is how much of a response body is kept in the
	// result.
	forwardResponseLimit = 1 << 10
	// forwardDrainLimit is how much more of a response body is read (and
	// discarded) so the connection can be reused.
	forwardDrainLimit = 64 << 10
	// forwardExcerptLimit bounds the response excerpt in an error.
	forwardExcerptLimit = 256
	// maxRetryAfter keeps a huge Retry-After from overflowing; the worker
	// caps snoozes far lower anyway.
	maxRetryAfter = 365 * 24 * time.Hour
)

// ForwardResult is the result of one forwarding request.
type ForwardResult struct {
	// URL is the destination, without user info, query or fragment.
	URL    string `json:"url"`
	Status int    `json:"status"`
	// Response is the start of the response body (up to 1 KiB).
	Response string `json:"response"`
}

// Forwarder is the Handler that POSTs an envelope to one destination. It
// does not use the transaction. It is safe for concurrent use.
//
// The request carries the original body byte for byte (or the stored
// payload once retention dropped the body) and its Content-Type (default
// application/json); Idempotency-Key and webhook-id "<source>:<delivery
// id>", the same on every retry; a Standard Webhooks signature
// (webhook-timestamp, webhook-signature) with the destination's secret;
// X-Inbox-Source, X-Inbox-Event-Type, X-Inbox-Envelope-Id; and User-Agent
// ForwardUserAgent. The destination's timeout bounds the whole exchange.
// Redirects are not followed.
//
// Outcomes: 2xx succeeds, with a ForwardResult; 429 or 503 with a
// Retry-After (seconds or HTTP date) is a *RetryAfterError; 408, 429 and 503
// without one, other 5xx, timeouts and connection errors are plain errors,
// retried; other 4xx and 3xx are a *PermanentError with the status and a
// response excerpt. Errors and results name the URL without user info or
// query, and never the secret.
type Forwarder struct {
	dest   config.Forward // validated, defaults filled in
	url    string         // redacted, for results and errors
	client *http.Client
}

// forwardTransport is the transport of forwarders given no client.
var forwardTransport = http.DefaultTransport.(*http.Transport).Clone()

// NewForwarder returns the Forwarder for dest, which it validates (see
// config.Forward.Validate) without changing it. client's Transport and
// Timeout are used (nil means the forwarders' own transport, a clone of
// http.DefaultTransport, so nothing else in the process that closes
// DefaultTransport's idle connections disturbs a forward), but never its
// redirect policy.
func NewForwarder(dest *config.Forward, client *http.Client) (*Forwarder, error) {
	if dest == nil {
		return nil, errors.New("no destination")
	}
	d := *dest
	d.Events = append([]string(nil), dest.Events...)
	if err := d.Validate(); err != nil {
		return nil, err
	}
	u, err := url.Parse(d.URL)
	if err != nil { // Validate parsed it already
		return nil, errors.New("url must be an absolute http or https URL")
	}
	c := http.Client{Transport: forwardTransport}
	if client != nil {
		c = *client
	}
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &Forwarder{dest: d, url: redactURL(u), client: &c}, nil
}

// URL returns the destination without user info, query or fragment.
func (f *Forwarder) URL() string { return f.url }

// Handle implements Handler: it POSTs env to the destination.
func (f *Forwarder) Handle(ctx context.Context, _ pgx.Tx, env *envelope.Envelope) (json.RawMessage, error) {
	body := env.BodyOrPayload()
	if body == nil {
		return nil, Permanent(WithCause(fmt.Errorf("forward to %s: envelope %d has neither body nor payload", f.url, env.ID), labels.CauseInvalidPayload))
	}
	ctx, span := f.startSpan(ctx)
	defer span.End()
	rctx, cancel := context.WithTimeout(ctx, f.dest.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, http.MethodPost, f.dest.URL, bytes.NewReader(body))
	if err != nil { // the URL was validated: only a bug gets here
		return nil, fmt.Errorf("forward to %s: build request", f.url)
	}
	key := env.Source + ":" + env.DeliveryID
	contentType := env.Headers["Content-Type"]
	if contentType == "" {
		contentType = "application/json"
	}
	h := req.Header
	h.Set("Content-Type", contentType)
	h.Set("User-Agent", ForwardUserAgent)
	h.Set("Idempotency-Key", key)
	h.Set("Webhook-Id", key)
	h.Set("X-Inbox-Source", env.Source)
	h.Set("X-Inbox-Event-Type", env.EventType)
	h.Set("X-Inbox-Envelope-Id", strconv.FormatInt(env.ID, 10))
	if err := provider.Sign(provider.Standard, f.dest.Secret, h, body, time.Now()); err != nil {
		return nil, Permanent(fmt.Errorf("forward to %s: sign: %w", f.url, err))
	}

	if span.IsRecording() {
		tracing.Propagator.Inject(rctx, propagation.HeaderCarrier(h)) // traceparent: the target's spans join the trace
	}
	resp, err := f.client.Do(req)
	if err != nil {
		span.SetStatus(codes.Error, "no response")
		return nil, f.transportError(ctx, rctx, err)
	}
	if span.IsRecording() {
		span.SetAttributes(attribute.Int("http.response.status_code", resp.StatusCode))
		if resp.StatusCode >= 400 {
			span.SetStatus(codes.Error, resp.Status)
		}
	}
	head, _ := io.ReadAll(io.LimitReader(resp.Body, forwardResponseLimit))
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, forwardDrainLimit))
	_ = resp.Body.Close()

	if err := f.classify(resp, head); err != nil {
		return nil, err
	}
	return marshal(ForwardResult{URL: f.url, Status: resp.StatusCode, Response: string(head)})
}

// startSpan starts the client span of one forward when ctx's span is
// recording (tracing on); otherwise it returns ctx and its non-recording
// span, allocating nothing. The URL is the redacted one (no user info, no
// query).
func (f *Forwarder) startSpan(ctx context.Context) (context.Context, trace.Span) {
	if !trace.SpanFromContext(ctx).IsRecording() {
		return ctx, trace.SpanFromContext(ctx)
	}
	return tracing.Start(ctx, "forward", trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(
		attribute.String("http.request.method", http.MethodPost),
		attribute.String("url.full", f.url),
	))
}

// transportError describes a request that got no response, without the
// URL's user info or query (which *url.Error would show). It stays a plain
// error: retried. ctx is the attempt's context, rctx the request's.
func (f *Forwarder) transportError(ctx, rctx context.Context, err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	switch {
	case ctx.Err() != nil:
		return fmt.Errorf("forward to %s: attempt ended: %w", f.url, err) // timeout or canceled, derived
	case rctx.Err() != nil:
		return WithCause(fmt.Errorf("forward to %s: no response within %s: %w", f.url, f.dest.Timeout, err), labels.CauseTimeout)
	default:
		return WithCause(fmt.Errorf("forward to %s: %w", f.url, err), labels.CauseForwardUnreachable)
	}
}

// classify maps a response to the Handler error contract.
func (f *Forwarder) classify(resp *http.Response, head []byte) error {
	code := resp.StatusCode
	switch {
	case code >= 200 && code < 300:
		return nil
	case code == http.StatusTooManyRequests || code == http.StatusServiceUnavailable:
		if after, ok := parseRetryAfter(resp.Header.Get("Retry-After"), time.Now()); ok {
			return RetryAfter(fmt.Errorf("forward to %s: status %d, retry after %s", f.url, code, after), after) // retry_after
		}
		return WithCause(fmt.Errorf("forward to %s: status %d%s", f.url, code, excerpt(head)), statusCause(code))
	case code == http.StatusRequestTimeout:
		return WithCause(fmt.Errorf("forward to %s: status %d%s", f.url, code, excerpt(head)), labels.CauseForward4xx)
	case code >= 300 && code < 400:
		return Permanent(WithCause(fmt.Errorf("forward to %s: status %d: redirects are not followed; configure the final URL", f.url, code), labels.CauseForward3xx))
	case code >= 400 && code < 500:
		return Permanent(WithCause(fmt.Errorf("forward to %s: status %d%s", f.url, code, excerpt(head)), labels.CauseForward4xx))
	default:
		return WithCause(fmt.Errorf("forward to %s: status %d%s", f.url, code, excerpt(head)), statusCause(code))
	}
}

// statusCause is the cause of a response with a status outside 2xx that
// classify retries: forward_4xx below 500, else forward_5xx (a status
// above 599 too).
func statusCause(code int) labels.Cause {
	if code < 500 {
		return labels.CauseForward4xx
	}
	return labels.CauseForward5xx
}

// parseRetryAfter reads a Retry-After value: delay seconds or an HTTP date
// (a date in the past gives 0). false when absent or malformed.
func parseRetryAfter(v string, now time.Time) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if secs, err := strconv.ParseUint(v, 10, 64); err == nil {
		if secs > uint64(maxRetryAfter/time.Second) {
			return maxRetryAfter, true
		}
		return time.Duration(secs) * time.Second, true
	}
	if t, err := http.ParseTime(v); err == nil {
		return min(max(t.Sub(now), 0), maxRetryAfter), true
	}
	return 0, false
}

// excerpt returns ": " and the start of a response body as one printable
// line, or "" for an empty body.
func excerpt(b []byte) string {
	if len(b) > forwardExcerptLimit {
		b = b[:forwardExcerptLimit] // a rune cut in two becomes U+FFFD below
	}
	s := strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return ' '
		}
		return r
	}, strings.ToValidUTF8(string(b), "\uFFFD"))
	s = strings.Join(strings.Fields(s), " ")
	if s == "" {
		return ""
	}
	return ": " + s
}

// redactURL returns u without user info, query and fragment.
func redactURL(u *url.URL) string {
	c := *u
	c.User = nil
	c.RawQuery = ""
	c.ForceQuery = false
	c.Fragment = ""
	c.RawFragment = ""
	return c.String()
}
