package provider

import (
	"crypto/sha256"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

const (
	githubSecret    = "It's a Secret to Everybody"
	githubOldSecret = "an old GitHub secret, rotated out"
	githubDelivery  = "72d3162e-cc78-11e3-81ab-4c9367dc0958"
)

var githubBody = []byte(`{"action":"opened","number":1,"pull_request":{"id":1},"repository":{"full_name":"octo/repo"}}`)

func githubSig(secret string, body []byte) string {
	return "sha256=" + hexMAC([]byte(secret), string(body))
}

// githubHeaders are the headers of a GitHub delivery of event, signed with
// sig (unsigned when sig is empty).
func githubHeaders(event, sig string) http.Header {
	h := hdr("X-GitHub-Delivery", githubDelivery, "X-GitHub-Event", event)
	if sig != "" {
		h.Set("X-Hub-Signature-256", sig)
	}
	return h
}

func githubCases(t testing.TB) []verifyCase {
	cfg := Config{Provider: GitHub, Secrets: []string{githubSecret}}
	rotated := Config{Provider: GitHub, Secrets: []string{githubOldSecret, githubSecret}}
	good := githubHeaders("pull_request", githubSig(githubSecret, githubBody))
	sig := func(v string) http.Header { return with(good, "X-Hub-Signature-256", v) }
	c := func(name string, h http.Header, body []byte, wantSig, wantFmt string) verifyCase {
		return verifyCase{name: name, cfg: cfg, h: h, body: body, now: t0, wantSig: wantSig, wantFmt: wantFmt}
	}
	ok := func(name string, cfg Config, h http.Header, body []byte, wantType string) verifyCase {
		return verifyCase{name: name, cfg: cfg, h: h, body: body, now: t0, wantID: githubDelivery, wantType: wantType}
	}
	// event is a signed request for event with body.
	event := func(event, body string) (http.Header, []byte) {
		return githubHeaders(event, githubSig(githubSecret, []byte(body))), []byte(body)
	}
	const (
		noMatch   = "no signature matches"
		malformed = "malformed X-Hub-Signature-256 header"
	)
	ping, pingBody := event("ping", `{"zen":"Design for failure.","hook_id":1}`)
	nonString, nonStringBody := event("issues", `{"action":{"name":"x"}}`)
	emptyAction, emptyActionBody := event("issues", `{"action":""}`)
	array, arrayBody := event("issues", `[{"action":"opened"}]`)
	form := url.Values{"payload": {string(githubBody)}}.Encode()
	formHeaders, formBody := event("pull_request", form)
	formHeaders.Set("Content-Type", "application/x-www-form-urlencoded")
	formCharset, formCharsetBody := event("pull_request", form)
	formCharset.Set("Content-Type", "application/x-www-form-urlencoded; charset=utf-8")
	formNoPayload, formNoPayloadBody := event("ping", "zen=x")
	formNoPayload.Set("Content-Type", "application/x-www-form-urlencoded")
	text, textBody := event("ping", "Hello, World!")
	empty, emptyBody := event("ping", "")
	longAction, longActionBody := event("pull_request", `{"action":"`+strings.Repeat("a", 256-len("pull_request."))+`"}`)
	tooLong, tooLongBody := event("pull_request", `{"action":"`+strings.Repeat("a", 257-len("pull_request."))+`"}`)

	return []verifyCase{
		ok("valid", cfg, good, githubBody, "pull_request.opened"),
		ok("signed by Sign", cfg, signed(t, GitHub, githubSecret, githubHeaders("pull_request", ""), githubBody, t0), githubBody, "pull_request.opened"),
		{name: "any now: GitHub signs no timestamp", cfg: cfg, h: good, body: githubBody, now: t0.AddDate(-10, 0, 0), wantID: githubDelivery, wantType: "pull_request.opened"},
		ok("rotation: second secret matches", rotated, good, githubBody, "pull_request.opened"),
		ok("rotation: first secret matches", rotated, sig(githubSig(githubOldSecret, githubBody)), githubBody, "pull_request.opened"),
		ok("no action", cfg, ping, pingBody, "ping"),
		ok("action not a string", cfg, nonString, nonStringBody, "issues"),
		ok("empty action", cfg, emptyAction, emptyActionBody, "issues"),
		ok("array body", cfg, array, arrayBody, "issues"),
		ok("with the SHA-1 header too", cfg, with(good, "X-Hub-Signature", "sha1=0000"), githubBody, "pull_request.opened"),
		ok("event type at its limit", cfg, longAction, longActionBody, "pull_request."+strings.Repeat("a", 256-len("pull_request."))),

		c("missing header", githubHeaders("pull_request", ""), githubBody, "missing X-Hub-Signature-256 header", ""),
		c("SHA-1 header only", with(githubHeaders("pull_request", ""), "X-Hub-Signature", "sha1="+strings.Repeat("0", 40)), githubBody, "missing X-Hub-Signature-256 header (the SHA-1 X-Hub-Signature is not accepted)", ""),
		c("no prefix", sig(strings.TrimPrefix(githubSig(githubSecret, githubBody), "sha256=")), githubBody, malformed, ""),
		c("sha1 prefix", sig("sha1="+strings.TrimPrefix(githubSig(githubSecret, githubBody), "sha256=")), githubBody, malformed, ""),
		c("upper-case prefix", sig("SHA256="+strings.TrimPrefix(githubSig(githubSecret, githubBody), "sha256=")), githubBody, malformed, ""),
		c("not hex", sig("sha256="+strings.Repeat("g", 64)), githubBody, malformed, ""),
		c("too short", sig(githubSig(githubSecret, githubBody)[:70]), githubBody, malformed, ""),
		c("empty value", sig("sha256="), githubBody, malformed, ""),
		c("two signatures", sig(githubSig(githubOldSecret, githubBody)+","+githubSig(githubSecret, githubBody)), githubBody, malformed, ""),
		c("tampered body", good, flip(githubBody, 5), noMatch, ""),
		c("tampered signature", sig("sha256="+hexFlip(strings.TrimPrefix(githubSig(githubSecret, githubBody), "sha256="))), githubBody, noMatch, ""),
		c("wrong secret", sig(githubSig("not the secret", githubBody)), githubBody, noMatch, ""),
		c("old secret after rotation", sig(githubSig(githubOldSecret, githubBody)), githubBody, noMatch, ""),

		{name: "form-encoded body", cfg: cfg, h: formHeaders, body: formBody, now: t0, wantID: githubDelivery, wantType: "pull_request.opened", wantPayload: string(githubBody)},
		{name: "form-encoded body with a charset", cfg: cfg, h: formCharset, body: formCharsetBody, now: t0, wantID: githubDelivery, wantType: "pull_request.opened", wantPayload: string(githubBody)},
		ok("form-encoded body without payload", cfg, formNoPayload, formNoPayloadBody, "ping"),
		ok("text body", cfg, text, textBody, "ping"),
		ok("empty body", cfg, empty, emptyBody, "ping"),
		ok("missing event header", cfg, with(good, "X-GitHub-Event", ""), githubBody, ""),
		ok("event type too long", cfg, tooLong, tooLongBody, ""),
		c("missing delivery header", with(good, "X-GitHub-Delivery", ""), githubBody, "", "missing delivery id (X-GitHub-Delivery header)"),
		c("delivery id too long", with(good, "X-GitHub-Delivery", strings.Repeat("d", 513)), githubBody, "", "delivery id (X-GitHub-Delivery header) is longer than 512 bytes"),
	}
}

func TestGitHubDelivery(t *testing.T) {
	t.Parallel()
	v, err := New(Config{Provider: GitHub, Secrets: []string{githubSecret}})
	require.NoError(t, err)
	h := signed(t, GitHub, githubSecret, hdr(
		"X-GitHub-Delivery", githubDelivery,
		"X-GitHub-Event", "pull_request",
		"X-GitHub-Hook-ID", "292430182",
		"X-GitHub-Hook-Installation-Target-Type", "repository",
		"X-GitHub-Hook-Installation-Target-ID", "79929171",
		"X-Hub-Signature", "sha1=d03a6f7d1d1c6b1b1f1b1b1b1b1b1b1b1b1b1b1b",
		"Content-Type", "application/json",
		"User-Agent", "GitHub-Hookshot/044aadd",
		"X-Forwarded-For", "192.0.2.1",
	), githubBody, t0)
	d, err := v.Verify(h, githubBody, time.Time{})
	require.NoError(t, err)
	require.Equal(t, Delivery{
		DeliveryID: githubDelivery,
		EventType:  "pull_request.opened",
		Payload:    githubBody,
		Headers: map[string]string{
			"Content-Type":                           "application/json",
			"User-Agent":                             "GitHub-Hookshot/044aadd",
			"X-Github-Delivery":                      githubDelivery,
			"X-Github-Event":                         "pull_request",
			"X-Github-Hook-Id":                       "292430182",
			"X-Github-Hook-Installation-Target-Type": "repository",
			"X-Github-Hook-Installation-Target-Id":   "79929171",
			"X-Hub-Signature-256":                    Redacted,
			"X-Hub-Signature":                        Redacted,
		},
		// The delivery id is not signed: a digest of the event type and
		// body recognises the body resent under another id.
		ReplayDigest: sha256Of("pull_request.opened\x00" + string(githubBody)),
	}, d)
}

func sha256Of(s string) []byte {
	sum := sha256.Sum256([]byte(s))
	return sum[:]
}

func TestGitHubEventType(t *testing.T) {
	t.Parallel()
	for _, tc := range [][3]string{
		{"pull_request", "opened", "pull_request.opened"},
		{"push", "", "push"},
		{"", "opened", ""}, // no event header: no type, whatever the body says
		{"", "", ""},
	} {
		require.Equal(t, tc[2], GitHubEventType(tc[0], tc[1]), "event %q action %q", tc[0], tc[1])
	}
}
