package provider

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
	"time"

	"github.com/google/go-github/v83/github"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	"github.com/stretchr/testify/require"
	"github.com/stripe/stripe-go/v82/webhook"
)

// These tests check the verifiers and Sign against the providers' own
// signing and verifying code: stripe-go's webhook package, the Standard
// Webhooks Go library, Svix's Go library (differential_test.go) and
// go-github's ValidatePayload.

// randomBody returns a JSON body of random size and content, with an id and
// a type.
func randomBody(r *rand.Rand) []byte {
	junk := make([]byte, r.IntN(2048))
	for i := range junk {
		junk[i] = byte(' ' + r.IntN(95)) // printable ASCII
	}
	s := fmt.Sprintf("%q", junk)
	return fmt.Appendf(nil, `{"id":"evt_%d","object":"event","type":"charge.refunded","data":%s}`, r.Uint64(), s)
}

func TestStripeAgainstStripeGo(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(1, 2))
	for i := range 50 {
		secret := fmt.Sprintf("whsec_%x", r.Uint64())
		body := randomBody(r)
		at := time.Unix(1_500_000_000+r.Int64N(1_000_000_000), 0)

		// stripe-go signs; we verify.
		p := webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: body, Secret: secret, Timestamp: at})
		v, err := New(Config{Provider: Stripe, Secrets: []string{"whsec_other", secret}})
		require.NoError(t, err)
		d, err := v.Verify(hdr("Stripe-Signature", p.Header), body, at.Add(time.Duration(i)*time.Second))
		require.NoError(t, err, "case %d", i)
		require.Equal(t, at.UTC(), d.SignedAt)
		require.Equal(t, "charge.refunded", d.EventType)

		// We sign exactly as stripe-go does.
		h := signed(t, Stripe, secret, nil, body, at)
		require.Equal(t, p.Header, h.Get("Stripe-Signature"), "case %d", i)

		// stripe-go verifies our signature with another secret: it must not.
		require.Error(t, webhook.ValidatePayloadIgnoringTolerance(body, h.Get("Stripe-Signature"), secret+"x"))
	}
}

func TestStripeSignVerifiedByStripeGo(t *testing.T) {
	t.Parallel()
	// stripe-go checks the timestamp against the wall clock.
	now := time.Now()
	body := []byte(`{"id":"evt_1","object":"event","type":"payment_intent.succeeded","api_version":"2025-01-27.acacia"}`)
	h := signed(t, Stripe, stripeSecret, nil, body, now)
	ev, err := webhook.ConstructEventWithOptions(body, h.Get("Stripe-Signature"), stripeSecret,
		webhook.ConstructEventOptions{IgnoreAPIVersionMismatch: true})
	require.NoError(t, err)
	require.Equal(t, "evt_1", ev.ID)
	require.EqualValues(t, "payment_intent.succeeded", ev.Type)

	_, err = webhook.ConstructEventWithOptions(flip(body, 3), h.Get("Stripe-Signature"), stripeSecret,
		webhook.ConstructEventOptions{IgnoreAPIVersionMismatch: true})
	require.ErrorIs(t, err, webhook.ErrNoValidSignature)

	stale := signed(t, Stripe, stripeSecret, nil, body, now.Add(-DefaultTolerance-time.Minute))
	_, err = webhook.ConstructEventWithOptions(body, stale.Get("Stripe-Signature"), stripeSecret,
		webhook.ConstructEventOptions{IgnoreAPIVersionMismatch: true})
	require.ErrorIs(t, err, webhook.ErrTooOld)
}

func TestStandardAgainstStandardWebhooksLibrary(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(3, 4))
	for i := range 50 {
		key := make([]byte, 24+r.IntN(40))
		for j := range key {
			key[j] = byte(r.Uint32())
		}
		secret := "whsec_" + base64.StdEncoding.EncodeToString(key)
		id := fmt.Sprintf("msg_%x", r.Uint64())
		body := randomBody(r)
		at := time.Unix(1_500_000_000+r.Int64N(1_000_000_000), 0)

		// The library signs; we verify.
		wh, err := standardwebhooks.NewWebhook(secret)
		require.NoError(t, err)
		sig, err := wh.Sign(id, at, body)
		require.NoError(t, err)
		h := standardHeaders(id, at.Unix(), sig)
		v, err := New(Config{Provider: Standard, Secrets: []string{standardOldSecret, secret}})
		require.NoError(t, err)
		d, err := v.Verify(h, body, at.Add(-time.Duration(i)*time.Second))
		require.NoError(t, err, "case %d", i)
		require.Equal(t, id, d.DeliveryID)
		require.Equal(t, at.UTC(), d.SignedAt)

		// We sign exactly as the library does.
		ours := signed(t, Standard, secret, hdr("webhook-id", id), body, at)
		require.Equal(t, sig, ours.Get("webhook-signature"), "case %d", i)
		require.Equal(t, fmt.Sprint(at.Unix()), ours.Get("webhook-timestamp"))
		require.NoError(t, wh.VerifyIgnoringTimestamp(body, ours))
	}
}

func TestStandardSignVerifiedByLibrary(t *testing.T) {
	t.Parallel()
	// The library checks the timestamp against the wall clock.
	now := time.Now()
	wh, err := standardwebhooks.NewWebhook(standardSecret)
	require.NoError(t, err)
	h := signed(t, Standard, standardSecret, hdr("webhook-id", standardID), standardBody, now)
	require.NoError(t, wh.Verify(standardBody, h))
	require.ErrorIs(t, wh.Verify(flip(standardBody, 3), h), standardwebhooks.ErrNoMatchingSignature)

	old := signed(t, Standard, standardSecret, hdr("webhook-id", standardID), standardBody, now.Add(-DefaultTolerance-time.Minute))
	require.ErrorIs(t, wh.Verify(standardBody, old), standardwebhooks.ErrMessageTooOld)

	// And our verifier agrees with the library on a multi-signature header
	// it produced plus one of ours.
	libSig, err := wh.Sign(standardID, now, standardBody)
	require.NoError(t, err)
	other, err := standardwebhooks.NewWebhook(standardOldSecret)
	require.NoError(t, err)
	otherSig, err := other.Sign(standardID, now, standardBody)
	require.NoError(t, err)
	multi := standardHeaders(standardID, now.Unix(), otherSig+" "+libSig)
	require.NoError(t, wh.Verify(standardBody, multi))
	v, err := New(Config{Provider: Standard, Secrets: []string{standardSecret}})
	require.NoError(t, err)
	_, err = v.Verify(multi, standardBody, now)
	require.NoError(t, err)
	_, err = v.Verify(standardHeaders(standardID, now.Unix(), otherSig), standardBody, now)
	require.Error(t, err)
}

// TestGitHubAgainstGoGitHub checks the verifier against go-github's
// ValidatePayload on both content types GitHub sends: it accepts exactly
// what go-github accepts, and its Payload is the JSON go-github returns
// (for a form-encoded body, the decoded "payload" field).
func TestGitHubAgainstGoGitHub(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(7, 8))
	v, err := New(Config{Provider: GitHub, Secrets: []string{githubSecret}})
	require.NoError(t, err)
	for i := range 40 {
		event := randomBody(r)
		body, contentType := event, "application/json"
		if i%2 == 1 {
			body, contentType = []byte(url.Values{"payload": {string(event)}}.Encode()), "application/x-www-form-urlencoded"
		}
		secret := githubSecret
		if i%5 == 4 {
			secret = "someone else's" // both must refuse
		}
		h := githubHeaders("issues", githubSig(secret, body))
		h.Set("Content-Type", contentType)

		req := httptest.NewRequest(http.MethodPost, "/", bytes.NewReader(body))
		req.Header = h
		want, refErr := github.ValidatePayload(req, []byte(githubSecret))
		d, err := v.Verify(h, body, t0)
		require.Equal(t, refErr == nil, err == nil, "case %d: go-github %v, ours %v", i, refErr, err)
		if refErr != nil {
			continue
		}
		require.Equal(t, string(want), string(d.Payload), "case %d", i)
		require.Equal(t, githubDelivery, d.DeliveryID)
	}
}
