package backfill

import (
	"cmp"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"time"

	"golang.org/x/time/rate"
)

// ClientOptions tune the HTTP side of a provider client. Zero values take
// the defaults.
type ClientOptions struct {
	// HTTPClient makes the requests (default: one with no overall timeout,
	// each request bounded by RequestTimeout, that follows no redirect: a
	// provider's API answers where it is asked, and a redirect, even to
	// another port of the same host, would carry the API key to whoever
	// answers there; a 3xx is an *APIError).
	HTTPClient *http.Client
	// RequestsPerSecond bounds the request rate (default 5).
	RequestsPerSecond float64
	// RequestTimeout bounds one request, body read included (default 30 s).
	RequestTimeout time.Duration
	// MaxRetries is how many times one request is retried after a 429, a
	// 5xx or a network error (default 5).
	MaxRetries int
	// BackoffMin and BackoffMax bound the wait before a retry that has no
	// Retry-After: exponential from BackoffMin, capped, with jitter
	// (defaults 500 ms, 30 s). A Retry-After is honoured up to MaxRetryAfter.
	BackoffMin, BackoffMax time.Duration
	// MaxRetryAfter caps the wait a Retry-After may ask for (default 2 min);
	// a longer one fails the request instead of hanging the run.
	MaxRetryAfter time.Duration
	// SleepFunc waits (default: a timer that ends with ctx). Tests record it.
	SleepFunc func(ctx context.Context, d time.Duration) error
}

func (o ClientOptions) withDefaults() ClientOptions {
	if o.HTTPClient == nil {
		o.HTTPClient = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	}
	o.RequestsPerSecond = cmp.Or(o.RequestsPerSecond, 5)
	o.RequestTimeout = cmp.Or(o.RequestTimeout, 30*time.Second)
	if o.MaxRetries == 0 {
		o.MaxRetries = 5
	}
	o.BackoffMin = cmp.Or(o.BackoffMin, 500*time.Millisecond)
	o.BackoffMax = cmp.Or(o.BackoffMax, 30*time.Second)
	o.MaxRetryAfter = cmp.Or(o.MaxRetryAfter, 2*time.Minute)
	if o.SleepFunc == nil {
		o.SleepFunc = sleep
	}
	return o
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// APIError is a provider API answer that is not a success. Its message
// carries the status and the provider's own error message, never a
// credential.
type APIError struct {
	Provider string
	Status   int
	// Message is the provider's error message (Stripe: error.message;
	// GitHub: message), when the body had one.
	Message string
	// Code is Stripe's error.code or type, when given.
	Code string
	// rateLimited marks a 403 that is GitHub's rate limit (Retry-After or
	// X-RateLimit-Remaining: 0): retried like a 429.
	rateLimited bool
}

func (e *APIError) Error() string {
	msg := fmt.Sprintf("%s API answered %d %s", e.Provider, e.Status, http.StatusText(e.Status))
	if e.Code != "" {
		msg += " (" + e.Code + ")"
	}
	if e.Message != "" {
		msg += ": " + e.Message
	}
	return msg
}

// retryable reports whether a request answered with status may succeed when
// sent again: rate limits, conflicts with a concurrent request and server
// errors.
func retryable(status int) bool {
	return status == http.StatusTooManyRequests || status == http.StatusConflict || status >= 500
}

// httpDoer sends requests with a rate limit, a timeout each and bounded
// retries.
type httpDoer struct {
	opts    ClientOptions
	limiter *rate.Limiter
	// decodeError reads a provider's error body into an *APIError.
	decodeError func(status int, body []byte) *APIError
	// secret is the credential, cut out of any message the API echoes it
	// in (Stripe's mock quotes the Authorization header whole).
	secret string
}

func newDoer(opts ClientOptions, secret string, decodeError func(int, []byte) *APIError) *httpDoer {
	opts = opts.withDefaults()
	return &httpDoer{opts: opts, limiter: rate.NewLimiter(rate.Limit(opts.RequestsPerSecond), 1), decodeError: decodeError, secret: secret}
}

// bearer is an Authorization value quoted in a message.
var bearer = regexp.MustCompile(`(?i)(bearer|basic|token)\s+[^\s'"` + "`" + `]+`)

// redact removes the credential, and anything that looks like an
// Authorization value, from a message the API wrote: the credential as sent
// and in any case, URL-escaped, and base64-encoded alone or as a basic-auth
// user ("key:").
func (c *httpDoer) redact(msg string) string {
	if c.secret != "" {
		forms := []string{c.secret, url.QueryEscape(c.secret)}
		for _, raw := range []string{c.secret, c.secret + ":"} {
			forms = append(forms, base64.StdEncoding.EncodeToString([]byte(raw)), base64.RawStdEncoding.EncodeToString([]byte(raw)),
				base64.URLEncoding.EncodeToString([]byte(raw)), base64.RawURLEncoding.EncodeToString([]byte(raw)))
		}
		for _, f := range forms {
			msg = regexp.MustCompile(`(?i)`+regexp.QuoteMeta(f)).ReplaceAllLiteralString(msg, "[redacted]")
		}
	}
	return bearer.ReplaceAllString(msg, "$1 [redacted]")
}

// maxBody bounds a response body: a page of 100 Stripe events is a few
// hundred KiB.
const maxBody = 32 << 20

// do sends the request build makes (once per try) and returns a 2xx
// answer's headers and body. A 429, 409 or 5xx answer, or a network error,
// is retried up to MaxRetries times after its Retry-After (capped) or a
// backoff; any other status is an *APIError at once.
func (c *httpDoer) do(ctx context.Context, build func(ctx context.Context) (*http.Request, error)) (http.Header, []byte, error) {
	var lastErr error
	for attempt := 0; ; attempt++ {
		if err := c.limiter.Wait(ctx); err != nil {
			return nil, nil, err
		}
		h, body, wait, err := c.once(ctx, build)
		if err == nil {
			return h, body, nil
		}
		var apiErr *APIError
		if errors.As(err, &apiErr) && !retryable(apiErr.Status) && !apiErr.rateLimited {
			return nil, nil, err
		}
		if ctx.Err() != nil {
			return nil, nil, ctx.Err()
		}
		lastErr = err
		if attempt >= c.opts.MaxRetries {
			return nil, nil, fmt.Errorf("gave up after %d tries: %w", attempt+1, lastErr)
		}
		if wait > c.opts.MaxRetryAfter {
			return nil, nil, fmt.Errorf("asked to retry after %s, more than the %s this client waits: %w", wait, c.opts.MaxRetryAfter, err)
		}
		if wait <= 0 {
			wait = c.backoff(attempt)
		}
		if err := c.opts.SleepFunc(ctx, wait); err != nil {
			return nil, nil, err
		}
	}
}

// once sends one request. wait is the answer's Retry-After, when it had one.
func (c *httpDoer) once(ctx context.Context, build func(ctx context.Context) (*http.Request, error)) (h http.Header, body []byte, wait time.Duration, err error) {
	rctx, cancel := context.WithTimeout(ctx, c.opts.RequestTimeout)
	defer cancel()
	req, err := build(rctx)
	if err != nil {
		return nil, nil, 0, err
	}
	resp, err := c.opts.HTTPClient.Do(req)
	if err != nil {
		// The URL holds no credential (they go in headers), so the
		// *url.Error may stay.
		return nil, nil, 0, err
	}
	defer resp.Body.Close()
	body, err = io.ReadAll(io.LimitReader(resp.Body, maxBody))
	if err != nil {
		return nil, nil, 0, fmt.Errorf("read %s answer: %w", req.URL.Path, err)
	}
	if resp.StatusCode/100 == 2 {
		return resp.Header, body, 0, nil
	}
	apiErr := c.decodeError(resp.StatusCode, body)
	if resp.StatusCode/100 == 3 {
		to := "elsewhere"
		if u, err := resp.Location(); err == nil {
			to = u.Scheme + "://" + u.Host
		}
		apiErr.Message = "redirected to " + to + ", not followed (the API key would go along): set api_url to the API's own address"
	}
	apiErr.Message, apiErr.Code = c.redact(apiErr.Message), c.redact(apiErr.Code)
	wait = retryAfter(resp.Header.Get("Retry-After"), time.Now())
	if resp.StatusCode == http.StatusForbidden && (resp.Header.Get("Retry-After") != "" || resp.Header.Get("X-RateLimit-Remaining") == "0") {
		apiErr.rateLimited = true
		if reset, err := strconv.ParseInt(resp.Header.Get("X-RateLimit-Reset"), 10, 64); err == nil && wait == 0 {
			wait = max(time.Until(time.Unix(reset, 0)), time.Second)
		}
	}
	return nil, nil, wait, apiErr
}

// backoff is the wait before retry attempt+1: exponential from BackoffMin,
// capped at BackoffMax, with up to 50% jitter taken off.
func (c *httpDoer) backoff(attempt int) time.Duration {
	d := c.opts.BackoffMin << min(attempt, 20)
	if d <= 0 || d > c.opts.BackoffMax {
		d = c.opts.BackoffMax
	}
	return d - time.Duration(rand.Int64N(int64(d)/2+1))
}

// retryAfter parses a Retry-After header: seconds, or an HTTP date. Zero
// when absent or unparsable.
func retryAfter(v string, now time.Time) time.Duration {
	if v == "" {
		return 0
	}
	if n, err := strconv.Atoi(v); err == nil && n >= 0 {
		return time.Duration(n) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(t.Sub(now), 0)
	}
	return 0
}
