package provider

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

const (
	stripeSecret    = "whsec_test_secret"
	stripeOldSecret = "whsec_old_rotated_secret"
)

var stripeBody = []byte(`{"id":"evt_1NG8Du2eZvKYlo2CUI79vXWy","object":"event","type":"payment_intent.succeeded","data":{"object":{"id":"pi_1"}}}`)

// stripeHeader is a Stripe-Signature header for body signed with secret at
// t, computed independently of the code under test.
func stripeHeader(secret string, t int64, body []byte) string {
	return fmt.Sprintf("t=%d,v1=%s", t, stripeV1(secret, t, body))
}

func stripeV1(secret string, t int64, body []byte) string {
	return hexMAC([]byte(secret), fmt.Sprintf("%d.%s", t, body))
}

func stripeCases(t testing.TB) []verifyCase {
	ts := t0.Unix()
	cfg := Config{Provider: Stripe, Secrets: []string{stripeSecret}}
	rotated := Config{Provider: Stripe, Secrets: []string{stripeOldSecret, stripeSecret}}
	good := stripeHeader(stripeSecret, ts, stripeBody)
	goodV1 := stripeV1(stripeSecret, ts, stripeBody)
	oldV1 := stripeV1(stripeOldSecret, ts, stripeBody)
	sig := func(v string) http.Header { return hdr("Stripe-Signature", v) }
	// signedBody is a request for body, validly signed.
	signedBody := func(body string) (http.Header, []byte) {
		return signed(t, Stripe, stripeSecret, nil, []byte(body), t0), []byte(body)
	}
	c := func(name string, h http.Header, body []byte, now time.Time, wantSig, wantFmt string) verifyCase {
		return verifyCase{name: name, cfg: cfg, h: h, body: body, now: now, wantSig: wantSig, wantFmt: wantFmt}
	}
	ok := func(name string, cfg Config, h http.Header, now time.Time) verifyCase {
		return verifyCase{name: name, cfg: cfg, h: h, body: stripeBody, now: now,
			wantID: "evt_1NG8Du2eZvKYlo2CUI79vXWy", wantType: "payment_intent.succeeded"}
	}
	const (
		malformed = "malformed Stripe-Signature header"
		noMatch   = "no signature matches"
		noV1      = "no v1 signature in Stripe-Signature header"
	)
	cases := []verifyCase{
		ok("valid", cfg, sig(good), t0),
		ok("signed by Sign", cfg, signed(t, Stripe, stripeSecret, nil, stripeBody, t0), t0),
		ok("exactly at the tolerance, past", cfg, sig(good), t0.Add(DefaultTolerance)),
		ok("exactly at the tolerance, future", cfg, sig(good), t0.Add(-DefaultTolerance)),
		ok("custom tolerance", Config{Provider: Stripe, Secrets: []string{stripeSecret}, Tolerance: time.Hour}, sig(good), t0.Add(59*time.Minute)),
		ok("rotation: second secret matches", rotated, sig(good), t0),
		ok("rotation: first secret matches", rotated, sig(stripeHeader(stripeOldSecret, ts, stripeBody)), t0),
		ok("second of two v1 matches", cfg, sig(fmt.Sprintf("t=%d,v1=%s,v1=%s", ts, oldV1, goodV1)), t0),
		ok("v0 and unknown keys ignored", cfg, sig(fmt.Sprintf("t=%d,v0=%s,v1=%s,v9=xyz,foo=bar", ts, oldV1, goodV1)), t0),
		ok("v1 before t", cfg, sig(fmt.Sprintf("v1=%s,t=%d", goodV1, ts)), t0),
		ok("undecodable v1 next to a good one", cfg, sig(fmt.Sprintf("t=%d,v1=zz,v1=%s", ts, goodV1)), t0),
		ok("spaces after commas", cfg, sig(fmt.Sprintf("t=%d, v1=%s", ts, goodV1)), t0),
		ok("upper-case hex", cfg, sig(fmt.Sprintf("t=%d,v1=%s", ts, strings.ToUpper(goodV1))), t0),

		c("missing header", http.Header{}, stripeBody, t0, "missing Stripe-Signature header", ""),
		c("empty header", sig(""), stripeBody, t0, "missing Stripe-Signature header", ""),
		c("header under another name", hdr("Stripe-Signature-256", good), stripeBody, t0, "missing Stripe-Signature header", ""),
		c("no equals sign", sig("garbage-header-value"), stripeBody, t0, malformed, ""),
		c("bare signature", sig(goodV1), stripeBody, t0, malformed, ""),
		c("no timestamp", sig("v1="+goodV1), stripeBody, t0, malformed, ""),
		c("empty timestamp", sig("t=,v1="+goodV1), stripeBody, t0, malformed, ""),
		c("non-numeric timestamp", sig("t=yesterday,v1="+goodV1), stripeBody, t0, malformed, ""),
		c("negative timestamp", sig(fmt.Sprintf("t=-%d,v1=%s", ts, goodV1)), stripeBody, t0, malformed, ""),
		c("fractional timestamp", sig(fmt.Sprintf("t=%d.5,v1=%s", ts, goodV1)), stripeBody, t0, malformed, ""),
		c("huge timestamp", sig("t=99999999999999999999,v1="+goodV1), stripeBody, t0, malformed, ""),
		c("two timestamps", sig(fmt.Sprintf("t=%d,t=%d,v1=%s", ts, ts, goodV1)), stripeBody, t0, malformed, ""),
		c("trailing comma", sig(good+","), stripeBody, t0, malformed, ""),
		c("semicolons", sig(strings.ReplaceAll(good, ",", ";")), stripeBody, t0, malformed, ""),
		c("v1 not hex", sig(fmt.Sprintf("t=%d,v1=%s", ts, strings.Repeat("zz", 32))), stripeBody, t0, malformed, ""),
		c("v1 too short", sig(fmt.Sprintf("t=%d,v1=%s", ts, goodV1[:62])), stripeBody, t0, malformed, ""),
		c("v1 too long", sig(fmt.Sprintf("t=%d,v1=%s00", ts, goodV1)), stripeBody, t0, malformed, ""),
		c("v1 empty", sig(fmt.Sprintf("t=%d,v1=", ts)), stripeBody, t0, malformed, ""),
		c("v0 only, even if it is the v1 value", sig(fmt.Sprintf("t=%d,v0=%s", ts, goodV1)), stripeBody, t0, noV1, ""),
		c("timestamp only", sig(fmt.Sprintf("t=%d", ts)), stripeBody, t0, noV1, ""),
		c("V1 in upper case", sig(fmt.Sprintf("t=%d,V1=%s", ts, goodV1)), stripeBody, t0, noV1, ""),
		c("tampered body", sig(good), flip(stripeBody, 10), t0, noMatch, ""),
		c("body with a trailing newline", sig(good), append(append([]byte(nil), stripeBody...), '\n'), t0, noMatch, ""),
		c("empty body", sig(good), nil, t0, noMatch, ""),
		c("tampered signature", sig(fmt.Sprintf("t=%d,v1=%s", ts, hexFlip(goodV1))), stripeBody, t0, noMatch, ""),
		c("tampered timestamp", sig(fmt.Sprintf("t=%d,v1=%s", ts+1, goodV1)), stripeBody, t0, noMatch, ""),
		c("timestamp with a leading zero", sig(fmt.Sprintf("t=0%d,v1=%s", ts, goodV1)), stripeBody, t0, noMatch, ""),
		c("wrong secret", sig(stripeHeader("whsec_someone_elses", ts, stripeBody)), stripeBody, t0, noMatch, ""),
		c("secret without its whsec_ prefix", sig(stripeHeader("test_secret", ts, stripeBody)), stripeBody, t0, noMatch, ""),
		c("old secret after rotation", sig(stripeHeader(stripeOldSecret, ts, stripeBody)), stripeBody, t0, noMatch, ""),
		c("stale", sig(good), stripeBody, t0.Add(DefaultTolerance+time.Second), "timestamp outside tolerance (too old)", ""),
		c("stale by a millisecond", sig(good), stripeBody, t0.Add(DefaultTolerance+time.Millisecond), "timestamp outside tolerance (too old)", ""),
		c("future by a millisecond", sig(good), stripeBody, t0.Add(-DefaultTolerance-time.Millisecond), "timestamp outside tolerance (in the future)", ""),
		c("stale by a day", sig(good), stripeBody, t0.Add(24*time.Hour), "timestamp outside tolerance (too old)", ""),
		c("future", sig(good), stripeBody, t0.Add(-DefaultTolerance-time.Second), "timestamp outside tolerance (in the future)", ""),
		c("stale and wrong secret", sig(stripeHeader("whsec_someone_elses", ts, stripeBody)), stripeBody, t0.Add(time.Hour), "timestamp outside tolerance (too old)", ""),
		c("zero timestamp", sig(stripeHeader(stripeSecret, 0, stripeBody)), stripeBody, t0, "timestamp outside tolerance (too old)", ""),
	}

	// Stripe's delivery id is in the body: a verified body without one
	// cannot be deduplicated, and is refused.
	formats := []struct{ name, body, want string }{
		{"not JSON", `id=evt_1&type=x`, `missing delivery id (body "id")`},
		{"truncated JSON", `{"id":"evt_1","type":"x"`, `missing delivery id (body "id")`},
		{"two JSON values", `{"id":"evt_1","type":"x"} {}`, `missing delivery id (body "id")`},
		{"empty", ``, `missing delivery id (body "id")`},
		{"invalid UTF-8", "{\"id\":\"evt_\xff\",\"type\":\"x\"}", `missing delivery id (body "id")`},
		{"array", `[{"id":"evt_1","type":"x"}]`, `missing delivery id (body "id")`},
		{"no id", `{"type":"payment_intent.succeeded"}`, `missing delivery id (body "id")`},
		{"empty id", `{"id":"","type":"payment_intent.succeeded"}`, `missing delivery id (body "id")`},
		{"null id", `{"id":null,"type":"payment_intent.succeeded"}`, `missing delivery id (body "id")`},
		{"numeric id", `{"id":42,"type":"payment_intent.succeeded"}`, `missing delivery id (body "id")`},
		{"id in another case", `{"ID":"evt_1","type":"payment_intent.succeeded"}`, `missing delivery id (body "id")`},
		{"id too long", `{"id":"evt_` + strings.Repeat("x", 509) + `","type":"t"}`, `delivery id (body "id") is longer than 512 bytes`},
		{"id with a NUL", `{"id":"evt_\u0000","type":"t"}`, `delivery id (body "id") is not printable UTF-8`},
	}
	for _, f := range formats {
		h, body := signedBody(f.body)
		cases = append(cases, c("format: "+f.name, h, body, t0, "", f.want))
	}
	// A verified body with an id is stored whatever else it lacks: the
	// event type is then empty (the worker ignores it unless a handler
	// matches), the payload nil when the body is not JSON.
	stored := []struct{ name, body, wantType string }{
		{"no type", `{"id":"evt_1"}`, ""},
		{"type not a string", `{"id":"evt_1","type":["a"]}`, ""},
		{"type too long", `{"id":"evt_1","type":"` + strings.Repeat("t", 257) + `"}`, ""},
		{"type with a newline", `{"id":"evt_1","type":"a\nb"}`, ""},
		{"NUL escape in JSON", `{"id":"evt_1","type":"x","note":"\u0000"}`, "x"},
	}
	for _, f := range stored {
		h, body := signedBody(f.body)
		cases = append(cases, verifyCase{name: "stored: " + f.name, cfg: cfg, h: h, body: body, now: t0, wantID: "evt_1", wantType: f.wantType})
	}
	h, body := signedBody(`{"id":"evt_` + strings.Repeat("x", 508) + `","type":"` + strings.Repeat("t", 256) + `"}`)
	cases = append(cases, verifyCase{name: "id and type at their limits", cfg: cfg, h: h, body: body, now: t0,
		wantID: "evt_" + strings.Repeat("x", 508), wantType: strings.Repeat("t", 256)})
	return cases
}

// hexFlip changes the first hex digit of s.
func hexFlip(s string) string {
	if s[0] == '0' {
		return "1" + s[1:]
	}
	return "0" + s[1:]
}

func TestStripeDelivery(t *testing.T) {
	t.Parallel()
	v, err := New(Config{Provider: Stripe, Secrets: []string{stripeSecret}})
	require.NoError(t, err)
	h := signed(t, Stripe, stripeSecret, hdr(
		"Content-Type", "application/json; charset=utf-8",
		"User-Agent", "Stripe/1.0 (+https://stripe.com/docs/webhooks)",
		"Cookie", "session=abc",
	), stripeBody, t0)
	d, err := v.Verify(h, stripeBody, t0.Add(time.Minute))
	require.NoError(t, err)
	require.Equal(t, Delivery{
		DeliveryID: "evt_1NG8Du2eZvKYlo2CUI79vXWy",
		EventType:  "payment_intent.succeeded",
		Payload:    stripeBody,
		Headers: map[string]string{
			"Content-Type":     "application/json; charset=utf-8",
			"User-Agent":       "Stripe/1.0 (+https://stripe.com/docs/webhooks)",
			"Stripe-Signature": Redacted,
		},
		SignedAt: t0,
	}, d)
	require.Equal(t, time.UTC, d.SignedAt.Location())
}
