package forward

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

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/inboxhq/inbox/internal/handlers"
	"github.com/inboxhq/inbox/internal/labels"
	"github.com/inboxhq/inbox/internal/provider"
	"github.com/inboxhq/inbox/internal/tracing"
)

// Forwarding request limits.
const (
	// UserAgent is the User-Agent of forwarding requests.
	UserAgent = "inbox-forwarder/1"
	// responseLimit is how much of a response body is kept in the
	// result.
	responseLimit = 1 << 10
	// drainLimit is how much more of a response body is read (and
	// discarded) so the connection can be reused.
	drainLimit = 64 << 10
	// excerptLimit bounds the response excerpt in an error.
	excerptLimit = 256
	// maxRetryAfter keeps a huge Retry-After from overflowing; the worker
	// caps snoozes far lower anyway.
	maxRetryAfter = 365 * 24 * time.Hour
)

// Result is the result of one forwarding request.
type Result struct {
	// URL is the destination, without user info, query or fragment.
	URL    string `json:"url"`
	Status int    `json:"status"`
	// Response is the start of the response body (up to 1 KiB).
	Response string `json:"response"`
}

// Handler is the handlers.Handler that POSTs an envelope to one destination. It
// does not use the transaction. It is safe for concurrent use.
//
// The request carries the original body byte for byte (or the stored
// payload once retention dropped the body) and its Content-Type (default
// application/json); Idempotency-Key and webhook-id "<source>:<delivery
// id>", the same on every retry; a Standard Webhooks signature
// (webhook-timestamp, webhook-signature) with the destination's secret;
// X-Inbox-Source, X-Inbox-Event-Type, X-Inbox-Envelope-Id; and User-Agent
// UserAgent. The destination's timeout bounds the whole exchange.
// Redirects are not followed.
//
// Outcomes: 2xx succeeds, with a Result; 429 or 503 with a
// Retry-After (seconds or HTTP date) is a *handlers.RetryAfterError; 408, 429 and 503
// without one, other 5xx, timeouts and connection errors are plain errors,
// retried; other 4xx and 3xx are a *handlers.PermanentError with the status and a
// response excerpt. Errors and results name the URL without user info or
// query, and never the secret.
type Handler struct {
	dest   Destination // validated, defaults filled in
	url    string      // redacted, for results and errors
	client *http.Client
}

// transport is the transport of forward handlers given no client.
var transport = http.DefaultTransport.(*http.Transport).Clone()

// NewHandler returns the Handler for dest with its defaults (see
// Destination.WithDefaults), which it validates without changing dest. client's Transport and
// Timeout are used (nil means the forward handlers' own transport, a clone of
// http.DefaultTransport, so nothing else in the process that closes
// DefaultTransport's idle connections disturbs a forward), but never its
// redirect policy.
func NewHandler(dest *Destination, client *http.Client) (*Handler, error) {
	if dest == nil {
		return nil, errors.New("no destination")
	}
	d := dest.WithDefaults()
	d.Events = append([]string(nil), dest.Events...)
	if err := d.Validate(); err != nil {
		return nil, err
	}
	u, err := url.Parse(d.URL)
	if err != nil { // Validate parsed it already
		return nil, errors.New("url must be an absolute http or https URL")
	}
	c := http.Client{Transport: transport}
	if client != nil {
		c = *client
	}
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &Handler{dest: d, url: redactURL(u), client: &c}, nil
}

// URL returns the destination without user info, query or fragment.
func (f *Handler) URL() string { return f.url }

// Handle implements handlers.Handler: it POSTs the run's envelope to the
// destination.
func (f *Handler) Handle(ctx context.Context, run handlers.Run) (json.RawMessage, error) {
	env := run.Envelope
	body := env.BodyOrPayload()
	if body == nil {
		return nil, handlers.Permanent(handlers.WithCause(fmt.Errorf("forward to %s: envelope %d has neither body nor payload", f.url, env.ID), labels.CauseInvalidPayload))
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
	h.Set("User-Agent", UserAgent)
	h.Set("Idempotency-Key", key)
	h.Set("Webhook-Id", key)
	h.Set("X-Inbox-Source", env.Source)
	h.Set("X-Inbox-Event-Type", env.EventType)
	h.Set("X-Inbox-Envelope-Id", strconv.FormatInt(env.ID, 10))
	if err := provider.Sign(provider.Standard, f.dest.Secret, h, body, time.Now()); err != nil {
		return nil, handlers.Permanent(fmt.Errorf("forward to %s: sign: %w", f.url, err))
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
	head, _ := io.ReadAll(io.LimitReader(resp.Body, responseLimit))
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, drainLimit))
	_ = resp.Body.Close()

	if err := f.classify(resp, head); err != nil {
		return nil, err
	}
	return handlers.EncodeResult(Result{URL: f.url, Status: resp.StatusCode, Response: string(head)})
}

// startSpan starts the client span of one forward when ctx's span is
// recording (tracing on); otherwise it returns ctx and its non-recording
// span, allocating nothing. The URL is the redacted one (no user info, no
// query).
func (f *Handler) startSpan(ctx context.Context) (context.Context, trace.Span) {
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
func (f *Handler) transportError(ctx, rctx context.Context, err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	switch {
	case ctx.Err() != nil:
		return fmt.Errorf("forward to %s: attempt ended: %w", f.url, err) // timeout or canceled, derived
	case rctx.Err() != nil:
		return handlers.WithCause(fmt.Errorf("forward to %s: no response within %s: %w", f.url, f.dest.Timeout, err), labels.CauseTimeout)
	default:
		return handlers.WithCause(fmt.Errorf("forward to %s: %w", f.url, err), labels.CauseForwardUnreachable)
	}
}

// classify maps a response to the handlers.Handler error contract.
func (f *Handler) classify(resp *http.Response, head []byte) error {
	code := resp.StatusCode
	switch {
	case code >= 200 && code < 300:
		return nil
	case code == http.StatusTooManyRequests || code == http.StatusServiceUnavailable:
		if after, ok := parseRetryAfter(resp.Header.Get("Retry-After"), time.Now()); ok {
			return handlers.RetryAfter(fmt.Errorf("forward to %s: status %d, retry after %s", f.url, code, after), after) // retry_after
		}
		return handlers.WithCause(fmt.Errorf("forward to %s: status %d%s", f.url, code, excerpt(head)), statusCause(code))
	case code == http.StatusRequestTimeout:
		return handlers.WithCause(fmt.Errorf("forward to %s: status %d%s", f.url, code, excerpt(head)), labels.CauseForward4xx)
	case code >= 300 && code < 400:
		return handlers.Permanent(handlers.WithCause(fmt.Errorf("forward to %s: status %d: redirects are not followed; configure the final URL", f.url, code), labels.CauseForward3xx))
	case code >= 400 && code < 500:
		return handlers.Permanent(handlers.WithCause(fmt.Errorf("forward to %s: status %d%s", f.url, code, excerpt(head)), labels.CauseForward4xx))
	default:
		return handlers.WithCause(fmt.Errorf("forward to %s: status %d%s", f.url, code, excerpt(head)), statusCause(code))
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
	if len(b) > excerptLimit {
		b = b[:excerptLimit] // a rune cut in two becomes U+FFFD below
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
