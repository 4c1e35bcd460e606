package provider

import (
	"encoding/base64"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	"github.com/stretchr/testify/require"
	svix "github.com/svix/svix-webhooks/go"
)

// The differential tests run the reference libraries' own test cases
// through the reference and through this package's verifier, and fail on
// any disagreement (accept vs refuse) that docs/providers.md does not list
// as deliberate. The cases are ported line for line from
// github.com/svix/svix-webhooks/go/webhook_test.go (v1.44.0) and
// github.com/standard-webhooks/standard-webhooks/libraries/go/webhook_test.go
// (v0.0.1), whose TestWebhook tables are the same but for Svix's
// "unbranded" case; the cases below "ours" are added here.

// refCase is one case of the references' TestWebhook table.
type refCase struct {
	name string
	// at is the signing time relative to now.
	at time.Duration
	// modify changes the signed request (headers named as Svix names them).
	modify func(h http.Header)
	// ignoreTimestamp is the reference's VerifyIgnoringTimestamp; this
	// package has no such mode, so it verifies with a tolerance of a century.
	ignoreTimestamp bool
	wantErr         bool
}

const refTolerance = 5 * time.Minute

func refCases() []refCase {
	return []refCase{
		{name: "valid signature is valid"},
		{name: "valid unbranded signature is valid", modify: func(h http.Header) {
			for _, k := range []string{"id", "timestamp", "signature"} {
				h.Set("webhook-"+k, h.Get("svix-"+k))
				h.Del("svix-" + k)
			}
		}},
		{name: "missing id returns error", modify: func(h http.Header) { h.Del("svix-id") }, wantErr: true},
		{name: "missing timestamp returns error", modify: func(h http.Header) { h.Del("svix-timestamp") }, wantErr: true},
		{name: "missing signature returns error", modify: func(h http.Header) { h.Del("svix-signature") }, wantErr: true},
		{name: "invalid signature is invalid", modify: func(h http.Header) {
			h.Set("svix-signature", "v1,Ceo5qEr07ixe2NLpvHk3FH9bwy/WavXrAFQ/9tdO6mc=")
		}, wantErr: true},
		{name: "partial signature is invalid", modify: func(h http.Header) { h.Set("svix-signature", "v1,") }, wantErr: true},
		{name: "old timestamp fails", at: -refTolerance, wantErr: true},
		{name: "new timestamp fails", at: refTolerance + time.Second, wantErr: true},
		{name: "valid multi sig is valid", modify: func(h http.Header) {
			h.Set("svix-signature", strings.Join([]string{
				"v1,Ceo5qEr07ixe2NLpvHk3FH9bwy/WavXrAFQ/9tdO6mc=",
				"v2,Ceo5qEr07ixe2NLpvHk3FH9bwy/WavXrAFQ/9tdO6mc=",
				h.Get("svix-signature"),
				"v1,Ceo5qEr07ixe2NLpvHk3FH9bwy/WavXrAFQ/9tdO6mc=",
			}, " "))
		}},
		{name: "old timestamp passes when ignoring tolerance", at: -refTolerance, ignoreTimestamp: true},
		{name: "new timestamp passes when ignoring tolerance", at: refTolerance, ignoreTimestamp: true},
		{name: "valid timestamp passes when ignoring tolerance", ignoreTimestamp: true},
		{name: "invalid timestamp fails when ignoring tolerance", modify: func(h http.Header) {
			h.Set("svix-timestamp", fmt.Sprint(time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC).Unix()))
		}, ignoreTimestamp: true, wantErr: true},

		// Ours: which header family wins when both are sent.
		{name: "ours: both families, svix right, webhook wrong", modify: func(h http.Header) {
			h.Set("webhook-id", h.Get("svix-id"))
			h.Set("webhook-timestamp", h.Get("svix-timestamp"))
			h.Set("webhook-signature", "v1,Ceo5qEr07ixe2NLpvHk3FH9bwy/WavXrAFQ/9tdO6mc=")
		}},
		{name: "ours: svix incomplete, webhook complete", modify: func(h http.Header) {
			h.Set("webhook-id", h.Get("svix-id"))
			h.Set("webhook-timestamp", h.Get("svix-timestamp"))
			h.Set("webhook-signature", h.Get("svix-signature"))
			h.Del("svix-id")
		}},
		{name: "ours: svix-signature only", modify: func(h http.Header) {
			h.Del("svix-id")
			h.Del("svix-timestamp")
		}, wantErr: true},
	}
}

// refRequest is the references' newTestPayload: the default message signed
// by Svix's library at now+at, in svix-* headers.
func refRequest(t *testing.T, secret string, now time.Time, at time.Duration) (http.Header, []byte) {
	t.Helper()
	const id = "msg_p5jXN8AQM9LWM0D4loKWxJek"
	body := []byte(`{"test": 2432232314}`)
	wh, err := svix.NewWebhook(secret)
	require.NoError(t, err)
	ts := now.Add(at)
	sig, err := wh.Sign(id, ts, body)
	require.NoError(t, err)
	h := http.Header{}
	h.Set("svix-id", id)
	h.Set("svix-signature", sig)
	h.Set("svix-timestamp", fmt.Sprint(ts.Unix()))
	return h, body
}

// TestDifferentialStandardWebhooks runs the references' TestWebhook cases
// through Svix's library, the Standard Webhooks library (which reads only
// webhook-* headers, so it gets the request renamed) and this verifier.
func TestDifferentialStandardWebhooks(t *testing.T) {
	t.Parallel()
	const secret = "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw" // the references' defaultSecret
	for _, c := range refCases() {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			// The references read the wall clock; so does this test, once.
			now := time.Now()
			h, body := refRequest(t, secret, now, c.at)
			if c.modify != nil {
				c.modify(h)
			}

			sw, err := svix.NewWebhook(secret)
			require.NoError(t, err)
			verify := sw.Verify
			if c.ignoreTimestamp {
				verify = sw.VerifyIgnoringTimestamp
			}
			svixErr := verify(body, h)
			require.Equal(t, c.wantErr, svixErr != nil, "Svix's library: %v", svixErr)

			cfg := Config{Provider: Standard, Secrets: []string{secret}}
			if c.ignoreTimestamp {
				cfg.Tolerance = 100 * 365 * 24 * time.Hour
			}
			v, err := New(cfg)
			require.NoError(t, err)
			_, ourErr := v.Verify(h, body, now)
			require.Equal(t, c.wantErr, ourErr != nil, "ours: %v", ourErr)

			// The Standard Webhooks library sees the one family it knows:
			// webhook-* as sent, else svix-* renamed (when complete).
			if strings.HasPrefix(c.name, "ours:") {
				return
			}
			sh := http.Header{}
			for _, k := range []string{"id", "timestamp", "signature"} {
				if v := h.Get("webhook-" + k); v != "" {
					sh.Set("webhook-"+k, v)
				} else if v := h.Get("svix-" + k); v != "" {
					sh.Set("webhook-"+k, v)
				}
			}
			sl, err := standardwebhooks.NewWebhook(secret)
			require.NoError(t, err)
			sverify := sl.Verify
			if c.ignoreTimestamp {
				sverify = sl.VerifyIgnoringTimestamp
			}
			stdErr := sverify(body, sh)
			require.Equal(t, c.wantErr, stdErr != nil, "Standard Webhooks library: %v", stdErr)
		})
	}
}

// TestSvixAgainstSvixLibrary checks the verifier on svix-* deliveries signed
// by Svix's own library, with random secrets and bodies, and that Svix's
// library verifies what Sign produces once renamed to svix-*.
func TestSvixAgainstSvixLibrary(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(5, 6))
	for i := range 50 {
		key := make([]byte, 24+r.IntN(40))
		for j := range key {
			key[j] = byte(r.Uint32())
		}
		secret := "whsec_" + base64.StdEncoding.EncodeToString(key)
		id := fmt.Sprintf("msg_%x", r.Uint64())
		body := randomBody(r)
		at := time.Unix(1_500_000_000+r.Int64N(1_000_000_000), 0)

		wh, err := svix.NewWebhook(secret)
		require.NoError(t, err)
		sig, err := wh.Sign(id, at, body)
		require.NoError(t, err)
		h := http.Header{}
		h.Set("svix-id", id)
		h.Set("svix-timestamp", fmt.Sprint(at.Unix()))
		h.Set("svix-signature", sig)
		v, err := New(Config{Provider: Standard, Secrets: []string{standardOldSecret, secret}})
		require.NoError(t, err)
		d, err := v.Verify(h, body, at.Add(time.Duration(i)*time.Second))
		require.NoError(t, err, "case %d", i)
		require.Equal(t, id, d.DeliveryID)
		require.Equal(t, "charge.refunded", d.EventType)
		require.Equal(t, at.UTC(), d.SignedAt)
		require.Equal(t, map[string]string{"Svix-Id": id, "Svix-Timestamp": fmt.Sprint(at.Unix()), "Svix-Signature": Redacted}, d.Headers)

		// A byte changed anywhere fails, as it does for the library.
		_, err = v.Verify(h, flip(body, r.IntN(len(body))), at)
		var se *SignatureError
		require.ErrorAs(t, err, &se)
		require.Equal(t, "no signature matches", se.Reason)

		ours := signed(t, Standard, secret, hdr("webhook-id", id), body, at)
		renamed := http.Header{}
		renamed.Set("svix-id", id)
		renamed.Set("svix-timestamp", ours.Get("webhook-timestamp"))
		renamed.Set("svix-signature", ours.Get("webhook-signature"))
		require.NoError(t, wh.VerifyIgnoringTimestamp(body, renamed), "case %d", i)
	}
}

// TestSvixHeaderErrors pins the messages for incomplete svix-* requests:
// they name the header the sender's family is missing.
func TestSvixHeaderErrors(t *testing.T) {
	t.Parallel()
	h, body := refRequest(t, standardSecret, t0, 0)
	v, err := New(Config{Provider: Standard, Secrets: []string{standardSecret}})
	require.NoError(t, err)
	for _, c := range []struct{ drop, want string }{
		{"svix-timestamp", "missing svix-timestamp header"},
		{"svix-signature", "missing webhook-signature header"},
		{"svix-id", "no signature matches"},
	} {
		hh := h.Clone()
		hh.Del(c.drop)
		_, err := v.Verify(hh, body, t0)
		var se *SignatureError
		require.ErrorAs(t, err, &se, c.drop)
		require.Equal(t, c.want, se.Reason, c.drop)
	}
	hh := h.Clone()
	hh.Set("svix-signature", "v1a,abc")
	_, err = v.Verify(hh, body, t0)
	require.EqualError(t, err, "signature rejected: no v1 signature in svix-signature header")
}

// TestStandardUnpaddedSecret: a secret whose base64 lost its padding is
// accepted (the Python library accepts it) and means the same key.
func TestStandardUnpaddedSecret(t *testing.T) {
	t.Parallel()
	padded := standardOldSecret // base64 of 25 bytes: ends in "="
	require.True(t, strings.HasSuffix(padded, "="))
	unpadded := strings.TrimRight(padded, "=")
	wh, err := standardwebhooks.NewWebhook(padded)
	require.NoError(t, err)
	sig, err := wh.Sign(standardID, t0, standardBody)
	require.NoError(t, err)

	v, err := New(Config{Provider: Standard, Secrets: []string{unpadded}})
	require.NoError(t, err)
	d, err := v.Verify(standardHeaders(standardID, t0.Unix(), sig), standardBody, t0)
	require.NoError(t, err)
	require.Equal(t, standardID, d.DeliveryID)
	require.NoError(t, Sign(Standard, unpadded, hdr("webhook-id", standardID), standardBody, t0))

	// Broken padding is still refused.
	_, err = New(Config{Provider: Standard, Secrets: []string{unpadded + "=="}})
	require.EqualError(t, err, "secret 1 is not base64 after the whsec_ prefix")
}
