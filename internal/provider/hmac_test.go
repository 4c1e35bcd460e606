package provider

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"hash"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	paddle "github.com/PaddleHQ/paddle-go-sdk/v4"
	"github.com/stretchr/testify/require"
)

// The presets are checked against each provider's own published example:
// Slack's "Verifying requests from Slack" walk-through, the test vectors of
// Square's SDKs (WebhooksHelper tests, the same in every language) and the
// Paddle Go SDK's webhook_verifier_test.go; Paddle's verifier is also run as
// an oracle.

const (
	slackSecret = "8f742231b10e8888abcd99yyyzzz85a5"
	slackBody   = "token=xyzz0WbapA4vBCDEFasx0q6G&team_id=T1DC2JH3J&team_domain=testteamnow&channel_id=G8PSS9T3V&channel_name=foobar&user_id=U2CERLKJA&user_name=roadrunner&command=%2Fwebhook-collect&text=&response_url=https%3A%2F%2Fhooks.slack.com%2Fcommands%2FT1DC2JH3J%2F397700885554%2F96rGlfmibIGlgcZRskXaIFfN&trigger_id=398738663015.47445629121.803a0bc887a14d10d2c447fce8b6703c"

	squareKey  = "Ibxx_5AKakO-3qeNVR61Dw"
	squareURL  = "https://webhook.site/679a4f3a-dcfa-49ee-bac5-9d0edad886b9"
	squareBody = `{"merchant_id":"MLEFBHHSJGVHD","type":"webhooks.test_notification","event_id":"ac3ac95b-f97d-458c-a6e6-18981597e05f","created_at":"2022-07-13T20:30:59.037339943Z","data":{"type":"webhooks","id":"bc368e64-01aa-407e-b46e-3231809b1129"}}`

	paddleSecret    = "pdl_ntfset_01hsdn8d43dt7mezr1ef2jtbaw_hKkRiCGyyRhbFwIUuqiTBgI7gnWoV0Gr"
	paddleSignature = "ts=1710929255;h1=6c05ef8fa83c44d751be6d259ec955ce5638e2c54095bf128e408e2fce1589c8"
	paddleBody      = `{"data":{"id":"pri_01hsdn96k2hxjzsq5yerecdj9j","name":null,"status":"active","quantity":{"maximum":999999,"minimum":1},"tax_mode":"account_setting","product_id":"pro_01hsdn8qp7yydry3x1yeg6a9rv","unit_price":{"amount":"1000","currency_code":"USD"},"custom_data":null,"description":"testing","import_meta":null,"trial_period":null,"billing_cycle":{"interval":"month","frequency":1},"unit_price_overrides":[]},"event_id":"evt_01hsdn97563968dy0szkmgjwh3","event_type":"price.created","occurred_at":"2024-03-20T10:07:35.590857Z","notification_id":"ntf_01hsdn977e920kbgzt6r6c9rqc"}`
)

func preset(t testing.TB, name, secret string, c HMACConfig) Verifier {
	t.Helper()
	c.Preset = name
	v, err := New(Config{Provider: HMAC, Secrets: []string{secret}, HMAC: &c})
	require.NoError(t, err)
	return v
}

func TestHMACPresetKnownAnswers(t *testing.T) {
	t.Parallel()
	slackAt := time.Unix(1531420618, 0)
	paddleAt := time.Unix(1710929255, 0)
	for _, c := range []struct {
		name     string
		v        Verifier
		h        http.Header
		sigName  string
		body     string
		now      time.Time
		wantID   string
		wantType string
		wantFmt  string
	}{
		{
			name: "slack (slash command, form-encoded)", v: preset(t, "slack", slackSecret, HMACConfig{}),
			h:       hdr("X-Slack-Request-Timestamp", "1531420618", "X-Slack-Signature", "v0=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503"),
			sigName: "X-Slack-Signature", body: slackBody, now: slackAt,
			wantID: "398738663015.47445629121.803a0bc887a14d10d2c447fce8b6703c", wantType: "/webhook-collect",
		},
		{
			name: "square", v: preset(t, "square", squareKey, HMACConfig{URL: squareURL}),
			h:       hdr("X-Square-HmacSha256-Signature", "GF4YkrJgGBDZ9NIYbNXBnMzqb2HoL4RW/S6vkZ9/2N4="),
			sigName: "X-Square-HmacSha256-Signature", body: squareBody, now: time.Now(),
			wantID: "ac3ac95b-f97d-458c-a6e6-18981597e05f", wantType: "webhooks.test_notification",
		},
		{
			// Square's second vector has no event_id: verified, then
			// refused for want of a delivery id.
			name: "square, unescaped characters", v: preset(t, "square", "signature-key", HMACConfig{URL: "https://webhook.site/webhooks"}),
			h:       hdr("X-Square-HmacSha256-Signature", "W3FlCNk5IA3ZQ2LHTWoajvzfaDu/OwY2tNHIHC3IUOA="),
			sigName: "X-Square-HmacSha256-Signature", body: `{"data":{"type":"webhooks","id":"fake_id"}}`, now: time.Now(),
			wantFmt: `missing delivery id (body "event_id")`,
		},
		{
			name: "square, escaped characters", v: preset(t, "square", "signature-key", HMACConfig{URL: "https://webhook.site/webhooks"}),
			h:       hdr("X-Square-HmacSha256-Signature", "Cxt7+aTi4rKgcA0bC4g9EHdVtLSDWdqccmL5MvihU4U="),
			sigName: "X-Square-HmacSha256-Signature", body: `{"data":{"type":"webhooks","id":">id<"}}`, now: time.Now(),
			wantFmt: `missing delivery id (body "event_id")`,
		},
		{
			name: "paddle", v: preset(t, "paddle", paddleSecret, HMACConfig{}),
			h:       hdr("Paddle-Signature", paddleSignature),
			sigName: "Paddle-Signature", body: paddleBody, now: paddleAt,
			wantID: "ntf_01hsdn977e920kbgzt6r6c9rqc", wantType: "price.created",
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			d, err := c.v.Verify(c.h, []byte(c.body), c.now)
			if c.wantFmt != "" {
				var fe *FormatError
				require.ErrorAs(t, err, &fe)
				require.Equal(t, c.wantFmt, fe.Reason)
			} else {
				require.NoError(t, err)
				require.Equal(t, c.wantID, d.DeliveryID)
				require.Equal(t, c.wantType, d.EventType)
				require.Equal(t, Redacted, d.Headers[http.CanonicalHeaderKey(c.sigName)])
			}
			// One character of the MAC changed: refused.
			sig := c.h.Get(c.sigName)
			i := len(sig) - 1
			if sig[i] == '=' {
				i = strings.IndexByte(sig, '=') - 1
			}
			tampered := []byte(sig)
			tampered[i] ^= 0x01
			_, err = c.v.Verify(with(c.h, c.sigName, string(tampered)), []byte(c.body), c.now)
			var se *SignatureError
			require.ErrorAs(t, err, &se)
			// And the body.
			_, err = c.v.Verify(c.h, append([]byte(c.body), ' '), c.now)
			require.ErrorAs(t, err, &se)
			require.Equal(t, "no signature matches", se.Reason)
		})
	}

	// Slack's timestamp is checked (5 minutes by default).
	v := preset(t, "slack", slackSecret, HMACConfig{})
	h := hdr("X-Slack-Request-Timestamp", "1531420618", "X-Slack-Signature", "v0=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503")
	_, err := v.Verify(h, []byte(slackBody), slackAt.Add(6*time.Minute))
	require.EqualError(t, err, "signature rejected: timestamp outside tolerance (too old)")
	_, err = v.Verify(with(h, "X-Slack-Request-Timestamp", "1531420619"), []byte(slackBody), slackAt)
	require.EqualError(t, err, "signature rejected: no signature matches")
	_, err = v.Verify(with(h, "X-Slack-Request-Timestamp", ""), []byte(slackBody), slackAt)
	require.EqualError(t, err, "signature rejected: missing X-Slack-Request-Timestamp header")
}

// paddleSign signs like Paddle: ts=<unix>;h1=hex(HMAC-SHA256(secret, ts:body)),
// computed here independently of the code under test.
func paddleSign(secret string, ts int64, body []byte) string {
	return fmt.Sprintf("ts=%d;h1=%s", ts, hexMAC([]byte(secret), fmt.Sprintf("%d:%s", ts, body)))
}

// The Paddle SDK's own verifier cases (webhook_verifier_test.go), run
// through the SDK and the paddle preset; then random deliveries: both must
// agree on every one.
func TestHMACPaddleAgainstPaddleSDK(t *testing.T) {
	t.Parallel()
	check := func(name, secret, sig string, body []byte, want bool) {
		t.Helper()
		req := httptest.NewRequest(http.MethodPost, "/", bytes.NewReader(body))
		if sig != "" {
			req.Header.Set("Paddle-Signature", sig)
		}
		ok, _ := paddle.NewWebhookVerifier(secret).Verify(req)
		v := preset(t, "paddle", secret, HMACConfig{})
		// The SDK checks no timestamp unless asked: verify at the signed time.
		at := paddleAt(sig)
		_, err := v.Verify(req.Header, body, at)
		var se *SignatureError
		ours := err == nil || !errorsAsSig(err, &se)
		require.Equal(t, want, ok, "%s: Paddle SDK", name)
		require.Equal(t, want, ours, "%s: ours (%v)", name, err)
	}
	check("valid signature", paddleSecret, paddleSignature, []byte(paddleBody), true)
	check("missing signature", paddleSecret, "", []byte(paddleBody), false)
	check("invalid payload", paddleSecret, paddleSignature, []byte(`{}`), false)
	check("invalid signature format", paddleSecret, "ts=x;h1=y", []byte(paddleBody), false)
	check("invalid secret key", "abc", paddleSignature, []byte(paddleBody), false)

	r := rand.New(rand.NewPCG(9, 10))
	for i := range 40 {
		secret := fmt.Sprintf("pdl_ntfset_%x", r.Uint64())
		body := fmt.Appendf(nil, `{"event_id":"evt_%x","event_type":"transaction.completed","notification_id":"ntf_%x","data":%q}`, r.Uint64(), r.Uint64(), randomBody(r))
		ts := 1_700_000_000 + r.Int64N(100_000_000)
		sig := paddleSign(secret, ts, body)
		if i%4 == 3 {
			sig = paddleSign(secret+"x", ts, body)
		}
		check(fmt.Sprintf("random %d", i), secret, sig, body, i%4 != 3)
	}
}

func paddleAt(sig string) time.Time {
	var ts int64
	if _, err := fmt.Sscanf(sig, "ts=%d;", &ts); err != nil {
		return time.Now()
	}
	return time.Unix(ts, 0)
}

func errorsAsSig(err error, se **SignatureError) bool {
	e, ok := err.(*SignatureError)
	if ok {
		*se = e
	}
	return ok
}

// A generic source is configuration: algorithm, encoding, prefix, template,
// timestamp, and where the id and type are.
func TestHMACGeneric(t *testing.T) {
	t.Parallel()
	secret := "generic-secret"
	body := []byte(`{"meta":{"id":42,"kind":"invoice.paid"}}`)
	ts := fmt.Sprint(t0.Unix())
	mac := func(h func() hash.Hash, msg string) []byte {
		m := hmac.New(h, []byte(secret))
		m.Write([]byte(msg))
		return m.Sum(nil)
	}
	cases := []struct {
		name string
		cfg  HMACConfig
		h    http.Header
	}{
		{"sha512 base64 over id.timestamp.body, id and type from headers",
			HMACConfig{SignatureHeader: "X-Sig", Algorithm: "sha512", Encoding: "base64", SignedContent: "{id}.{timestamp}.{body}",
				TimestampHeader: "X-Ts", DeliveryID: Field{Header: "X-Id"}, EventType: Field{Header: "X-Event"}},
			hdr("X-Sig", base64.StdEncoding.EncodeToString(mac(sha512.New, "d_1."+ts+"."+string(body))), "X-Ts", ts, "X-Id", "d_1", "X-Event", "invoice.paid")},
		{"sha1 hex with prefix over the body, id and type from JSON paths",
			HMACConfig{SignatureHeader: "X-Hub-Signature", Algorithm: "sha1", Prefix: "sha1=",
				DeliveryID: Field{JSON: "meta.id"}, EventType: Field{JSON: "meta.kind"}},
			hdr("X-Hub-Signature", "sha1="+hex.EncodeToString(mac(sha1.New, string(body))))},
		{"pairs with a url template",
			HMACConfig{SignatureHeader: "Sig", Pairs: &HMACPairs{Separator: ",", Signature: "v1", Timestamp: "t"},
				SignedContent: "{timestamp}{url}{body}", URL: "https://hooks.example.com/in",
				DeliveryID: Field{JSON: "meta.id"}, EventType: Field{JSON: "meta.kind"}},
			hdr("Sig", "t="+ts+",v1=00,v1="+hex.EncodeToString(mac(sha256.New, ts+"https://hooks.example.com/in"+string(body))))},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			v, err := New(Config{Provider: HMAC, Secrets: []string{"old", secret}, HMAC: &c.cfg})
			require.NoError(t, err)
			d, err := v.Verify(c.h, body, t0)
			require.NoError(t, err)
			if c.cfg.DeliveryID.Header != "" {
				require.Equal(t, "d_1", d.DeliveryID)
			} else {
				require.Equal(t, "42", d.DeliveryID)
			}
			require.Equal(t, "invoice.paid", d.EventType)
			_, err = v.Verify(c.h, flip(body, 3), t0)
			require.EqualError(t, err, "signature rejected: no signature matches")
		})
	}
}

func TestHMACConfigErrors(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		cfg  *HMACConfig
		want string
	}{
		{nil, "provider hmac needs an hmac section"},
		{&HMACConfig{Preset: "paypal"}, `unknown hmac preset "paypal" (want one of paddle, slack, square)`},
		{&HMACConfig{Preset: "square"}, "signed_content uses {url} but no url is set (the endpoint URL as configured at the sender)"},
		{&HMACConfig{SignatureHeader: "X", DeliveryID: Field{Header: "Y"}, Algorithm: "md5"}, `hmac algorithm "md5" (want sha1, sha256 or sha512)`},
		{&HMACConfig{SignatureHeader: "X", DeliveryID: Field{Header: "Y"}, Encoding: "base32"}, `hmac encoding "base32" (want hex or base64)`},
		{&HMACConfig{DeliveryID: Field{Header: "Y"}}, "hmac signature_header is required"},
		{&HMACConfig{SignatureHeader: "X"}, "hmac delivery_id is required (header, json or form): it deduplicates deliveries"},
		{&HMACConfig{SignatureHeader: "X", DeliveryID: Field{Header: "Y"}, SignedContent: "{timestamp}.{body}"}, "signed_content uses {timestamp} but no timestamp_header (or pairs.timestamp) is set"},
		{&HMACConfig{SignatureHeader: "X", DeliveryID: Field{JSON: "id"}, SignedContent: "{id}.{body}"}, "signed_content uses {id}, which needs delivery_id from a header"},
		{&HMACConfig{SignatureHeader: "X", DeliveryID: Field{Header: "Y"}, SignedContent: "{nonce}{body}"}, "signed_content: unknown placeholder {nonce} (want {body}, {timestamp}, {id} or {url})"},
		{&HMACConfig{Preset: "square", URL: "/relative"}, "hmac url must be an absolute URL"},
	} {
		_, err := New(Config{Provider: HMAC, Secrets: []string{"s3cr3t"}, HMAC: c.cfg})
		require.EqualError(t, err, c.want)
	}
	_, err := New(Config{Provider: Stripe, Secrets: []string{"s3cr3t"}, HMAC: &HMACConfig{Preset: "slack"}})
	require.EqualError(t, err, `an hmac section is only for provider hmac, not "stripe"`)
}
