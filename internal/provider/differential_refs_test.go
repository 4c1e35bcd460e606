package provider

import (
	"bytes"
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/go-github/v83/github"
	"github.com/stretchr/testify/require"
	"github.com/stripe/stripe-go/v82/webhook"
)

// deliberate lists the disagreements with a reference that are on purpose;
// each is documented in docs/providers.md under the phrase given, which the
// tests check is there. Any other disagreement fails.
var deliberate = map[string]string{
	"github-sha1":     "GitHub's SHA-1 `X-Hub-Signature` alone is refused here",
	"github-sha512":   "`sha512=` in `X-Hub-Signature` is refused here",
	"github-nosecret": "go-github accepts an unsigned request when no secret is given",
}

func requireDocumented(t *testing.T, key string) {
	t.Helper()
	doc, err := os.ReadFile("../../docs/providers.md")
	require.NoError(t, err)
	phrase, ok := deliberate[key]
	require.True(t, ok, "unknown deliberate difference %q", key)
	require.Contains(t, string(doc), phrase, "docs/providers.md must list the deliberate difference %q", key)
}

// sigAccepted reports whether Verify got past the signature: nil, or a
// FormatError, which Verify returns only once the signature matched.
func sigAccepted(err error) bool {
	_, isSig := err.(*SignatureError)
	return !isSig
}

// TestDifferentialStripe runs the cases of stripe-go's webhook
// client_test.go (TestTokenNew, v82.5.1) through stripe-go's ValidatePayload
// family and this verifier. stripe-go reads the wall clock, so the cases
// are signed relative to it.
func TestDifferentialStripe(t *testing.T) {
	t.Parallel()
	const secret = "whsec_test_secret" // stripe-go's testSecret
	payload := []byte(`{
  "id": "evt_test_webhook",
  "object": "event",
  "api_version": "2025-01-27.acacia"
}`)
	signed := func(p []byte, at time.Time, secret, scheme string) string {
		return webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: p, Secret: secret, Timestamp: at, Scheme: scheme}).Header
	}
	now := time.Now()
	good := signed(payload, now, secret, "")
	rolled := hex.EncodeToString(webhook.ComputeSignature(now, payload, secret+"_rolled_key"))
	old15 := signed(payload, now.Add(-15*time.Second), secret, "")
	ancient := signed(payload, time.Unix(12345, 0), secret, "")
	type refFunc func(payload []byte, header, secret string) error
	plain := refFunc(webhook.ValidatePayload)
	within := func(d time.Duration) refFunc {
		return func(p []byte, h, s string) error { return webhook.ValidatePayloadWithTolerance(p, h, s, d) }
	}
	ignoring := refFunc(webhook.ValidatePayloadIgnoringTolerance)
	for _, c := range []struct {
		name      string
		payload   []byte
		header    string
		secret    string
		ref       refFunc
		tolerance time.Duration // ours; 0 is the default 5 minutes
	}{
		{"valid", payload, good, secret, plain, 0},
		{"invalid JSON is still validly signed", append(append([]byte(nil), payload...), '['), signed(append(append([]byte(nil), payload...), '['), now, secret, ""), secret, plain, 0},
		{"missing signature", payload, "", secret, plain, 0},
		{"bad header format v1,t=1", payload, "v1,t=1", secret, plain, 0},
		{"bad header format t=", payload, "t=", secret, plain, 0},
		{"unreadable extra v1 ignored", payload, good + ",v1=bad_signature", secret, plain, 0},
		{"scheme v0 only", payload, signed(payload, now, secret, "v0"), secret, plain, 0},
		{"fake signature", payload, strings.Split(good, ",")[0] + ",v1=" + hex.EncodeToString([]byte("deadbeef")), secret, plain, 0},
		{"rolled key, old secret", payload, good + ",v1=" + rolled, secret, plain, 0},
		{"rolled key, new secret", payload, good + ",v1=" + rolled, secret + "_rolled_key", plain, 0},
		{"outside a 10 s tolerance", payload, old15, secret, within(10 * time.Second), 10 * time.Second},
		{"inside a 20 s tolerance", payload, old15, secret, within(20 * time.Second), 20 * time.Second},
		{"no tolerance", payload, ancient, secret, ignoring, 100 * 365 * 24 * time.Hour},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			refErr := c.ref(c.payload, c.header, c.secret)
			v, err := New(Config{Provider: Stripe, Secrets: []string{c.secret}, Tolerance: c.tolerance})
			require.NoError(t, err)
			h := http.Header{}
			if c.header != "" {
				h.Set("Stripe-Signature", c.header)
			}
			_, ourErr := v.Verify(h, c.payload, time.Now())
			require.Equal(t, refErr == nil, sigAccepted(ourErr), "stripe-go: %v; ours: %v", refErr, ourErr)
		})
	}
}

// TestDifferentialGitHub runs the cases of go-github's messages_test.go
// (TestValidatePayload, _FormPost, v83.0.0) through ValidatePayload and
// this verifier.
func TestDifferentialGitHub(t *testing.T) {
	t.Parallel()
	const body = `{"yo":true}`
	secret := "0123456789abcdef"
	form := url.Values{"payload": {body}}.Encode()
	for _, c := range []struct {
		name, header, signature, contentType, body, secret string
		deliberate                                         string // key in deliberate when the verdicts differ on purpose
	}{
		{name: "missing signature", secret: secret, body: body},
		{name: "missing prefix", header: github.SHA1SignatureHeader, signature: "yo", secret: secret, body: body},
		{name: "not hex", header: github.SHA1SignatureHeader, signature: "sha1=yo", secret: secret, body: body},
		{name: "invalid signature", header: github.SHA1SignatureHeader, signature: "sha1=012345", secret: secret, body: body},
		{name: "signature without secret", header: github.SHA1SignatureHeader, signature: "sha1=126f2c800419c60137ce748d7672e77b65cf16d6", body: body},
		{name: "no secret, no signature", body: body, deliberate: "github-nosecret"},
		{name: "sha1", header: github.SHA1SignatureHeader, signature: "sha1=126f2c800419c60137ce748d7672e77b65cf16d6", secret: secret, body: body, deliberate: "github-sha1"},
		{name: "sha256 in X-Hub-Signature", header: github.SHA1SignatureHeader, signature: "sha256=b1f8020f5b4cd42042f807dd939015c4a418bc1ff7f604dd55b0a19b5d953d9b", secret: secret, body: body, deliberate: "github-sha1"},
		{name: "sha256", header: github.SHA256SignatureHeader, signature: "sha256=b1f8020f5b4cd42042f807dd939015c4a418bc1ff7f604dd55b0a19b5d953d9b", secret: secret, body: body},
		{name: "sha512 in X-Hub-Signature", header: github.SHA1SignatureHeader, signature: "sha512=8456767023c1195682e182a23b3f5d19150ecea598fde8cb85918f7281b16079471b1329f92b912c4d8bd7455cb159777db8f29608b20c7c87323ba65ae62e1f", secret: secret, body: body, deliberate: "github-sha512"},
		{name: "form post, sha1", header: github.SHA1SignatureHeader, signature: "sha1=3374ef144403e8035423b23b02e2c9d7a4c50368", contentType: "application/x-www-form-urlencoded", secret: secret, body: form, deliberate: "github-sha1"},
		{name: "form post, sha256", header: github.SHA256SignatureHeader, signature: githubSig(secret, []byte(form)), contentType: "application/x-www-form-urlencoded", secret: secret, body: form},
		{name: "form post, invalid signature", header: github.SHA256SignatureHeader, signature: "invalid signature", contentType: "application/x-www-form-urlencoded", secret: secret, body: form},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			ct := c.contentType
			if ct == "" {
				ct = "application/json"
			}
			req := httptest.NewRequest(http.MethodPost, "http://localhost/event", bytes.NewReader([]byte(c.body)))
			req.Header.Set("Content-Type", ct)
			if c.signature != "" {
				req.Header.Set(c.header, c.signature)
			}
			req.Header.Set("X-GitHub-Delivery", githubDelivery)
			req.Header.Set("X-GitHub-Event", "ping")
			refPayload, refErr := github.ValidatePayload(req, []byte(c.secret))

			// This verifier always has a secret: a source without one does
			// not start.
			s := c.secret
			if s == "" {
				s = "the source's secret"
			}
			v, err := New(Config{Provider: GitHub, Secrets: []string{s}})
			require.NoError(t, err)
			d, ourErr := v.Verify(req.Header, []byte(c.body), t0)
			if (refErr == nil) != (ourErr == nil) {
				require.NotEmpty(t, c.deliberate, "go-github: %v; ours: %v", refErr, ourErr)
				requireDocumented(t, c.deliberate)
				return
			}
			require.Empty(t, c.deliberate, "the verdicts agree: the case is no longer a deliberate difference")
			if refErr == nil {
				require.Equal(t, string(refPayload), string(d.Payload))
			}
		})
	}
}
