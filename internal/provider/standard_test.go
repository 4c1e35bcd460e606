package provider

import (
	"encoding/base64"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

const (
	standardSecret    = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	standardOldSecret = "whsec_b2xkIHNlY3JldCwgcm90YXRlZCBvdXQ="
	standardID        = "msg_2KWPBgLlAfxdpx2AI54pPJ85f1W"
)

var standardBody = []byte(`{"type":"payment.succeeded","timestamp":"2023-11-14T22:13:20Z","data":{"payment_id":"pay_1","merchant_id":"m_1","amount_minor":1250,"currency":"EUR"}}`)

// standardV1 is a webhook-signature entry for the request, computed
// independently of the code under test.
func standardV1(secret, id string, ts int64, body []byte) string {
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	if err != nil {
		panic(err)
	}
	return "v1," + b64MAC(key, fmt.Sprintf("%s.%d.%s", id, ts, body))
}

// standardHeaders are the headers of a Standard Webhooks request.
func standardHeaders(id string, ts int64, sig string) http.Header {
	h := http.Header{}
	if id != "" {
		h.Set("webhook-id", id)
	}
	h.Set("webhook-timestamp", fmt.Sprint(ts))
	if sig != "" {
		h.Set("webhook-signature", sig)
	}
	return h
}

func standardCases(t testing.TB) []verifyCase {
	ts := t0.Unix()
	cfg := Config{Provider: Standard, Secrets: []string{standardSecret}}
	rotated := Config{Provider: Standard, Secrets: []string{standardOldSecret, standardSecret}}
	goodV1 := standardV1(standardSecret, standardID, ts, standardBody)
	oldV1 := standardV1(standardOldSecret, standardID, ts, standardBody)
	good := standardHeaders(standardID, ts, goodV1)
	sig := func(v string) http.Header { return with(good, "webhook-signature", v) }
	c := func(name string, h http.Header, body []byte, now time.Time, wantSig, wantFmt string) verifyCase {
		return verifyCase{name: name, cfg: cfg, h: h, body: body, now: now, wantSig: wantSig, wantFmt: wantFmt}
	}
	ok := func(name string, cfg Config, h http.Header, now time.Time) verifyCase {
		return verifyCase{name: name, cfg: cfg, h: h, body: standardBody, now: now, wantID: standardID, wantType: "payment.succeeded"}
	}
	const (
		noMatch   = "no signature matches"
		malformed = "malformed webhook-signature header"
		noV1      = "no v1 signature in webhook-signature header"
	)
	cases := []verifyCase{
		ok("valid", cfg, good, t0),
		ok("signed by Sign", cfg, signed(t, Standard, standardSecret, hdr("webhook-id", standardID), standardBody, t0), t0),
		ok("exactly at the tolerance, past", cfg, good, t0.Add(DefaultTolerance)),
		ok("exactly at the tolerance, future", cfg, good, t0.Add(-DefaultTolerance)),
		ok("custom tolerance", Config{Provider: Standard, Secrets: []string{standardSecret}, Tolerance: 10 * time.Minute}, good, t0.Add(-9*time.Minute)),
		ok("secret without the whsec_ prefix", Config{Provider: Standard, Secrets: []string{strings.TrimPrefix(standardSecret, "whsec_")}}, good, t0),
		ok("rotation: second secret matches", rotated, good, t0),
		ok("rotation: first secret matches", rotated, sig(oldV1), t0),
		ok("second of two v1 matches", cfg, sig(oldV1+" "+goodV1), t0),
		ok("other versions skipped", cfg, sig("v1a,"+strings.TrimPrefix(goodV1, "v1,")+" v2,abc "+goodV1), t0),
		ok("entries without a comma skipped", cfg, sig("garbage "+goodV1), t0),
		ok("extra spaces", cfg, sig("  "+oldV1+"   "+goodV1+" "), t0),
		ok("undecodable v1 next to a good one", cfg, sig("v1,!!! "+goodV1), t0),

		c("missing signature header", with(good, "webhook-signature", ""), standardBody, t0, "missing webhook-signature header", ""),
		c("missing timestamp header", with(good, "webhook-timestamp", ""), standardBody, t0, "missing webhook-timestamp header", ""),
		c("non-numeric timestamp", with(good, "webhook-timestamp", "2023-11-14T22:13:20Z"), standardBody, t0, "malformed webhook-timestamp header", ""),
		c("negative timestamp", with(good, "webhook-timestamp", "-1"), standardBody, t0, "malformed webhook-timestamp header", ""),
		c("timestamp in milliseconds", with(good, "webhook-timestamp", fmt.Sprint(t0.UnixMilli())), standardBody, t0, "timestamp outside tolerance (in the future)", ""),
		c("no v1: only v1a", sig("v1a,"+strings.TrimPrefix(goodV1, "v1,")), standardBody, t0, noV1, ""),
		c("no v1: no comma", sig(strings.TrimPrefix(goodV1, "v1,")), standardBody, t0, noV1, ""),
		c("no v1: Stripe style", sig("v1="+strings.TrimPrefix(goodV1, "v1,")), standardBody, t0, noV1, ""),
		c("comma-separated list", sig(oldV1+","+goodV1), standardBody, t0, malformed, ""),
		c("v1 not base64", sig("v1,not-base64!"), standardBody, t0, malformed, ""),
		c("v1 too short", sig("v1,"+base64.StdEncoding.EncodeToString([]byte("short"))), standardBody, t0, malformed, ""),
		c("v1 unpadded", sig(strings.TrimSuffix(goodV1, "=")), standardBody, t0, malformed, ""),
		c("v1 with URL-safe characters", sig("v1,-"+strings.TrimPrefix(goodV1, "v1,")[1:]), standardBody, t0, malformed, ""),
		c("v1 empty", sig("v1,"), standardBody, t0, malformed, ""),
		c("tampered body", good, flip(standardBody, 12), t0, noMatch, ""),
		c("tampered signature", sig("v1,"+b64Flip(strings.TrimPrefix(goodV1, "v1,"))), standardBody, t0, noMatch, ""),
		c("tampered id", with(good, "webhook-id", standardID+"x"), standardBody, t0, noMatch, ""),
		c("missing id", with(good, "webhook-id", ""), standardBody, t0, noMatch, ""),
		c("tampered timestamp", with(good, "webhook-timestamp", fmt.Sprint(ts+1)), standardBody, t0, noMatch, ""),
		c("wrong secret", sig(standardV1("whsec_c29tZW9uZSBlbHNlJ3Mgc2VjcmV0", standardID, ts, standardBody)), standardBody, t0, noMatch, ""),
		c("old secret after rotation", sig(oldV1), standardBody, t0, noMatch, ""),
		c("keyed by the secret string, Stripe style", sig("v1,"+b64MAC([]byte(standardSecret), fmt.Sprintf("%s.%d.%s", standardID, ts, standardBody))), standardBody, t0, noMatch, ""),
		c("stale", good, standardBody, t0.Add(DefaultTolerance+time.Second), "timestamp outside tolerance (too old)", ""),
		c("future", good, standardBody, t0.Add(-DefaultTolerance-time.Second), "timestamp outside tolerance (in the future)", ""),
	}

	signedBody := func(id, body string) (http.Header, []byte) {
		return standardHeaders(id, ts, standardV1(standardSecret, id, ts, []byte(body))), []byte(body)
	}
	formats := []struct{ name, id, body, want string }{
		{"signed without webhook-id", "", `{"type":"payment.succeeded"}`, "missing delivery id (webhook-id header)"},
		{"id too long", strings.Repeat("m", 513), `{"type":"payment.succeeded"}`, "delivery id (webhook-id header) is longer than 512 bytes"},
		{"id not UTF-8", "msg_\xff", `{"type":"payment.succeeded"}`, "delivery id (webhook-id header) is not printable UTF-8"},
	}
	for _, f := range formats {
		h, body := signedBody(f.id, f.body)
		cases = append(cases, c("format: "+f.name, h, body, t0, "", f.want))
	}
	// A verified delivery with an id is stored whatever its body (a
	// Replicate prediction has no "type"; the libraries' own test vector is
	// {"test": 2432232314}).
	stored := []struct{ name, body, wantType string }{
		{"not JSON", `type=payment.succeeded`, ""},
		{"invalid UTF-8", "{\"type\":\"\xc3\x28\"}", ""},
		{"empty", ``, ""},
		{"no type", `{"data":{}}`, ""},
		{"the libraries' vector", `{"test": 2432232314}`, ""},
		{"empty type", `{"type":""}`, ""},
		{"array body", `[]`, ""},
		{"type too long", `{"type":"` + strings.Repeat("t", 257) + `"}`, ""},
		{"type with a newline", `{"type":"a\nb"}`, ""},
	}
	for _, f := range stored {
		h, body := signedBody(standardID, f.body)
		cases = append(cases, verifyCase{name: "stored: " + f.name, cfg: cfg, h: h, body: body, now: t0, wantID: standardID, wantType: f.wantType})
	}
	h, body := signedBody(strings.Repeat("m", 512), `{"type":"x"}`)
	cases = append(cases, verifyCase{name: "id at its limit", cfg: cfg, h: h, body: body, now: t0, wantID: strings.Repeat("m", 512), wantType: "x"})
	return cases
}

// b64Flip changes the first base64 digit of s.
func b64Flip(s string) string {
	if s[0] == 'A' {
		return "B" + s[1:]
	}
	return "A" + s[1:]
}

func TestStandardDelivery(t *testing.T) {
	t.Parallel()
	v, err := New(Config{Provider: Standard, Secrets: []string{standardSecret}})
	require.NoError(t, err)
	h := signed(t, Standard, standardSecret, hdr(
		"webhook-id", standardID,
		"Content-Type", "application/json",
		"User-Agent", "Svix-Webhooks/1.0",
		"Authorization", "Bearer abc",
	), standardBody, t0)
	d, err := v.Verify(h, standardBody, t0)
	require.NoError(t, err)
	require.Equal(t, Delivery{
		DeliveryID: standardID,
		EventType:  "payment.succeeded",
		Payload:    standardBody,
		Headers: map[string]string{
			"Content-Type":      "application/json",
			"User-Agent":        "Svix-Webhooks/1.0",
			"Webhook-Id":        standardID,
			"Webhook-Timestamp": "1700000000",
			"Webhook-Signature": Redacted,
		},
		SignedAt: t0,
	}, d)
}

// A Standard Webhooks sender that puts its event type elsewhere (a
// Replicate prediction has no "type") is configured with event_type.
func TestStandardEventTypeFromConfig(t *testing.T) {
	t.Parallel()
	body := []byte(`{"id":"pred_1","status":"succeeded","output":["x"]}`)
	h := standardHeaders(standardID, t0.Unix(), standardV1(standardSecret, standardID, t0.Unix(), body))
	h.Set("X-Event", "prediction.completed")
	for _, c := range []struct {
		field *Field
		want  string
	}{
		{nil, ""},
		{&Field{JSON: "status"}, "succeeded"},
		{&Field{Header: "X-Event"}, "prediction.completed"},
		{&Field{JSON: "missing"}, ""},
	} {
		v, err := New(Config{Provider: Standard, Secrets: []string{standardSecret}, EventType: c.field})
		require.NoError(t, err)
		d, err := v.Verify(h, body, t0)
		require.NoError(t, err)
		require.Equal(t, c.want, d.EventType, "%+v", c.field)
		require.Equal(t, standardID, d.DeliveryID)
	}
	_, err := New(Config{Provider: Standard, Secrets: []string{standardSecret}, EventType: &Field{}})
	require.EqualError(t, err, "event_type needs a header, json or form")
	_, err = New(Config{Provider: Stripe, Secrets: []string{"whsec_x"}, EventType: &Field{JSON: "x"}})
	require.EqualError(t, err, `event_type is only for provider standard (hmac: hmac.event_type), not "stripe"`)
}
