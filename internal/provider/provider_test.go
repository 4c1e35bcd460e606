package provider

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
)

// t0 is the time most tests run at: the Stripe vector's timestamp.
var t0 = time.Unix(1700000000, 0).UTC()

// verifyCase is one request to one configured verifier and its expected
// outcome: a SignatureError with wantSig, a FormatError with wantFmt, or
// (both empty) a Delivery with wantID, wantType and a Payload that is
// wantPayload when set, else the body when it is JSON, else nil.
type verifyCase struct {
	name        string
	cfg         Config
	h           http.Header
	body        []byte
	now         time.Time
	wantSig     string
	wantFmt     string
	wantID      string
	wantType    string
	wantPayload string
}

// run verifies c and checks its outcome.
func (c verifyCase) run(t *testing.T) {
	t.Helper()
	v, err := New(c.cfg)
	require.NoError(t, err)
	d, err := v.Verify(c.h, c.body, c.now)
	switch {
	case c.wantSig != "":
		var se *SignatureError
		require.ErrorAs(t, err, &se)
		require.Equal(t, c.wantSig, se.Reason)
		require.Zero(t, d)
	case c.wantFmt != "":
		var fe *FormatError
		require.ErrorAs(t, err, &fe)
		require.Equal(t, c.wantFmt, fe.Reason)
		require.Zero(t, d)
	default:
		require.NoError(t, err)
		require.Equal(t, c.wantID, d.DeliveryID)
		require.Equal(t, c.wantType, d.EventType)
		switch {
		case c.wantPayload != "":
			require.Equal(t, c.wantPayload, string(d.Payload))
		case utf8.Valid(c.body) && json.Valid(c.body):
			require.Equal(t, string(c.body), string(d.Payload))
		default:
			require.Nil(t, d.Payload, "a body that is not JSON has no payload")
		}
	}
}

// allCases returns every provider's verification cases.
func allCases(t testing.TB) []verifyCase {
	var cases []verifyCase
	cases = append(cases, stripeCases(t)...)
	cases = append(cases, standardCases(t)...)
	cases = append(cases, githubCases(t)...)
	cases = append(cases, shopifyCases(t)...)
	return cases
}

func TestVerify(t *testing.T) {
	t.Parallel()
	for _, c := range allCases(t) {
		t.Run(c.cfg.Provider+"/"+c.name, func(t *testing.T) {
			t.Parallel()
			c.run(t)
		})
	}
}

// TestErrorsNameNoSecret checks that no rejection message contains a secret,
// a received signature, or the signature the request should have carried.
func TestErrorsNameNoSecret(t *testing.T) {
	t.Parallel()
	rejections := 0
	for _, c := range allCases(t) {
		if c.wantSig == "" && c.wantFmt == "" {
			continue
		}
		rejections++
		v, err := New(c.cfg)
		require.NoError(t, err)
		_, err = v.Verify(c.h, c.body, c.now)
		require.Error(t, err, c.name)
		msg := err.Error()
		for _, f := range forbidden(c) {
			require.NotContains(t, msg, f, "%s/%s", c.cfg.Provider, c.name)
		}
	}
	require.Greater(t, rejections, 80)
}

// forbidden lists what a rejection of c must not reveal: its secrets (and
// their decoded keys), the values of its signature headers and their parts,
// and the signatures each secret gives for its request.
func forbidden(c verifyCase) []string {
	var out []string
	for _, k := range signatureHeaders {
		out = append(out, signatureParts(c.h.Get(k))...)
	}
	for _, s := range append(c.cfg.Secrets, allSecrets...) {
		out = append(out, s, strings.TrimPrefix(s, "whsec_"))
		if k, err := standardKey(s); err == nil {
			out = append(out, string(k))
		}
		h := c.h.Clone()
		if h == nil {
			h = http.Header{}
		}
		if Sign(c.cfg.Provider, s, h, c.body, c.now) != nil {
			continue // a Standard request without webhook-id, or a secret that is not a Standard one
		}
		for _, k := range signatureHeaders {
			out = append(out, signatureParts(h.Get(k))...)
		}
	}
	return out
}

var signatureHeaders = []string{"Stripe-Signature", "webhook-signature", "X-Hub-Signature-256", "X-Hub-Signature", "X-Shopify-Hmac-Sha256"}

// signatureParts returns a signature header value and its parts long enough
// to be signatures.
func signatureParts(v string) []string {
	var out []string
	if len(v) >= 8 {
		out = append(out, v)
	}
	for _, p := range strings.FieldsFunc(v, func(r rune) bool { return r == ',' || r == ' ' || r == '=' }) {
		if len(p) >= 16 {
			out = append(out, p)
		}
	}
	return out
}

// allSecrets are every secret the tests use.
var allSecrets = []string{stripeSecret, stripeOldSecret, standardSecret, standardOldSecret, githubSecret, githubOldSecret, shopifySecret, shopifyOldSecret}

func TestNew(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name    string
		cfg     Config
		wantErr string
	}{
		{"unknown provider", Config{Provider: "paypal", Secrets: []string{"s3cr3t-value"}}, `unknown provider "paypal" (want one of stripe, github, shopify, standard, hmac)`},
		{"empty provider", Config{Secrets: []string{"s3cr3t-value"}}, `unknown provider ""`},
		{"no secrets", Config{Provider: Stripe}, "no secret configured"},
		{"empty secret list", Config{Provider: GitHub, Secrets: []string{}}, "no secret configured"},
		{"empty secret", Config{Provider: GitHub, Secrets: []string{"s3cr3t-value", ""}}, "secret 2 is empty"},
		{"trailing newline", Config{Provider: Shopify, Secrets: []string{"s3cr3t-value\n"}}, "secret 1 has leading or trailing white space"},
		{"leading space", Config{Provider: Stripe, Secrets: []string{" whsec_s3cr3t-value"}}, "secret 1 has leading or trailing white space"},
		{"bad standard secret", Config{Provider: Standard, Secrets: []string{standardSecret, "whsec_s3cr3t-value!"}}, "secret 2 is not base64 after the whsec_ prefix"},
		{"standard secret is only the prefix", Config{Provider: Standard, Secrets: []string{"whsec_"}}, "secret 1 is not base64 after the whsec_ prefix"},
		{"negative tolerance", Config{Provider: Stripe, Secrets: []string{"s3cr3t-value"}, Tolerance: -time.Second}, "tolerance is negative"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			v, err := New(c.cfg)
			require.Nil(t, v)
			require.ErrorContains(t, err, c.wantErr)
			for _, s := range c.cfg.Secrets {
				if s = strings.TrimSpace(strings.TrimPrefix(s, "whsec_")); s != "" {
					require.NotContains(t, err.Error(), s)
				}
			}
			if c.cfg.Provider == "paypal" || c.cfg.Provider == "" {
				require.ErrorIs(t, err, ErrUnknownProvider)
			}
		})
	}
}

func TestNewAcceptsEveryProvider(t *testing.T) {
	t.Parallel()
	secrets := map[string]string{Stripe: stripeSecret, Standard: standardSecret, GitHub: githubSecret, Shopify: shopifySecret}
	for _, p := range Names {
		v, err := New(Config{Provider: p, Secrets: []string{secrets[p]}})
		require.NoError(t, err, p)
		require.NotNil(t, v, p)
	}
}

func TestSignErrors(t *testing.T) {
	t.Parallel()
	h := http.Header{}
	require.ErrorIs(t, Sign("paypal", "s3cr3t-value", h, nil, t0), ErrUnknownProvider)
	require.EqualError(t, Sign(Stripe, "", h, nil, t0), "secret is empty")
	require.EqualError(t, Sign(Standard, standardSecret, h, nil, t0), "webhook-id header must be set before signing")
	h.Set("webhook-id", "msg_1")
	err := Sign(Standard, "whsec_s3cr3t-value!", h, nil, t0)
	require.EqualError(t, err, "secret is not base64 after the whsec_ prefix")
	require.Empty(t, h.Get("webhook-signature"), "a failed Sign sets nothing")
}

// TestSignSetsOnlySignatures checks Sign adds no delivery id or event
// header: only each provider's signature (and signed timestamp).
func TestSignSetsOnlySignatures(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		provider, secret string
		want             []string
	}{
		{Stripe, stripeSecret, []string{"Stripe-Signature"}},
		{Standard, standardSecret, []string{"Webhook-Id", "Webhook-Signature", "Webhook-Timestamp"}},
		{GitHub, githubSecret, []string{"X-Hub-Signature-256"}},
		{Shopify, shopifySecret, []string{"X-Shopify-Hmac-Sha256"}},
	} {
		h := http.Header{}
		if c.provider == Standard {
			h.Set("webhook-id", "msg_1")
		}
		require.NoError(t, Sign(c.provider, c.secret, h, []byte(`{}`), t0))
		var got []string
		for k := range h {
			got = append(got, k)
		}
		require.ElementsMatch(t, c.want, got, c.provider)
	}
}

func TestErrorMessages(t *testing.T) {
	t.Parallel()
	require.Equal(t, "signature rejected: no signature matches", (&SignatureError{Reason: "no signature matches"}).Error())
	missing := formatErr("missing delivery id (webhook-id header)")
	require.Equal(t, "malformed delivery: missing delivery id (webhook-id header)", missing.Error())
	var fe *FormatError
	require.True(t, errors.As(missing, &fe))
}

func TestPayloadIsACopy(t *testing.T) {
	t.Parallel()
	body := []byte(`{"id":1}`)
	h := hdr("X-Shopify-Webhook-Id", "wh_1", "X-Shopify-Topic", "orders/paid")
	require.NoError(t, Sign(Shopify, shopifySecret, h, body, t0))
	v, err := New(Config{Provider: Shopify, Secrets: []string{shopifySecret}})
	require.NoError(t, err)
	d, err := v.Verify(h, body, t0)
	require.NoError(t, err)
	body[0] = 'X'
	require.Equal(t, `{"id":1}`, string(d.Payload))
}

func TestParseUnix(t *testing.T) {
	t.Parallel()
	for _, s := range []string{"", "-1", "+1", " 1", "1 ", "1.5", "0x10", "1e9", "1234567890123456789", "１"} {
		_, ok := parseUnix(s)
		require.False(t, ok, "%q", s)
	}
	for s, want := range map[string]int64{"0": 0, "1700000000": 1700000000, "001": 1, "999999999999999999": 999999999999999999} {
		got, ok := parseUnix(s)
		require.True(t, ok, s)
		require.Equal(t, want, got.Unix(), s)
	}
}

// hdr builds a header from name, value pairs.
func hdr(kv ...string) http.Header {
	h := http.Header{}
	for i := 0; i < len(kv); i += 2 {
		h.Add(kv[i], kv[i+1])
	}
	return h
}

// with returns a copy of h with name set to value (removed when value is
// empty).
func with(h http.Header, name, value string) http.Header {
	h = h.Clone()
	if value == "" {
		h.Del(name)
	} else {
		h.Set(name, value)
	}
	return h
}

// signed returns a copy of h with the headers provider would send for body,
// signed with secret at now.
func signed(t testing.TB, provider, secret string, h http.Header, body []byte, now time.Time) http.Header {
	t.Helper()
	h = h.Clone()
	if h == nil {
		h = http.Header{}
	}
	require.NoError(t, Sign(provider, secret, h, body, now))
	return h
}

// macOf is HMAC-SHA256(key, msg), computed here independently of the code
// under test.
func macOf(key []byte, msg string) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(msg))
	return m.Sum(nil)
}

func hexMAC(key []byte, msg string) string { return hex.EncodeToString(macOf(key, msg)) }

func b64MAC(key []byte, msg string) string {
	return base64.StdEncoding.EncodeToString(macOf(key, msg))
}

// flip returns a copy of b with its byte at i changed.
func flip(b []byte, i int) []byte {
	b = append([]byte(nil), b...)
	b[i] ^= 0x01
	return b
}
