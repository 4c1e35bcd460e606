package config_test

import (
	"strings"
	"testing"
	"time"

	"github.com/inboxhq/inbox/internal/config"
	"github.com/inboxhq/inbox/internal/labels"
)

// The brief's Standard Webhooks known-answer secret.
const forwardSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

// parseForward parses a sources file whose source "payments" has the given
// forward list (YAML, indented under "forward:").
func parseForward(forward string) (*config.Config, error) {
	env := map[string]string{"FORWARD_SECRET": forwardSecret, "SOURCE_SECRET": forwardSecret}
	return config.Parse([]byte(`
sources:
  payments:
    provider: standard
    secrets: ["${SOURCE_SECRET}"]
    forward:
`+forward), func(k string) string { return env[k] })
}

func TestForwardDefaults(t *testing.T) {
	t.Parallel()
	cfg, err := parseForward(`
      - url: https://internal.example/hooks/payments
        secret: ${FORWARD_SECRET}
      - url: http://10.0.0.7:8080/in
        secret: ${FORWARD_SECRET}
        events: ["payment.*", "refund.created", "*"]
        mode: instead
        timeout: 60s
`)
	if err != nil {
		t.Fatal(err)
	}
	fw := cfg.Sources["payments"].Forward
	if len(fw) != 2 {
		t.Fatalf("got %d destinations, want 2", len(fw))
	}
	if fw[0].Mode != config.ForwardBesides || fw[0].Timeout != config.DefaultForwardTimeout || fw[0].Secret != forwardSecret || len(fw[0].Events) != 0 {
		t.Errorf("first destination = %+v, want besides, 10s, the expanded secret, every event", *fw[0])
	}
	if fw[1].Mode != config.ForwardInstead || fw[1].Timeout != time.Minute || len(fw[1].Events) != 3 {
		t.Errorf("second destination = %+v", *fw[1])
	}
}

func TestForwardInvalid(t *testing.T) {
	t.Parallel()
	const bad = "whsec_c2VjcmV0*not-base64"
	for _, tt := range []struct {
		name, entry, want string
	}{
		{"no url", `secret: ${FORWARD_SECRET}`, "url must be an absolute http or https URL"},
		{"relative url", `{url: /hooks, secret: "${FORWARD_SECRET}"}`, "url must be"},
		{"other scheme", `{url: "ftp://files.example/x", secret: "${FORWARD_SECRET}"}`, "url must be"},
		{"no host", `{url: "http:///x", secret: "${FORWARD_SECRET}"}`, "url must be"},
		{"unparsable url with credentials", `{url: "http://user:p%zz@host/", secret: "${FORWARD_SECRET}"}`, "url must be"},
		{"no secret", `{url: "http://h/"}`, "secret is required"},
		{"bad secret", `{url: "http://h/", secret: "` + bad + `"}`, "secret must be a Standard Webhooks secret"},
		{"secret with a newline", `{url: "http://h/", secret: "` + forwardSecret + `\n"}`, "secret must be"},
		{"mode", `{url: "http://h/", secret: "${FORWARD_SECRET}", mode: Instead}`, `mode "Instead"`},
		{"negative timeout", `{url: "http://h/", secret: "${FORWARD_SECRET}", timeout: -1s}`, "timeout must not be negative"},
		{"long timeout", `{url: "http://h/", secret: "${FORWARD_SECRET}", timeout: 61s}`, "exceeds the maximum of 1m0s"},
		{"empty pattern", `{url: "http://h/", secret: "${FORWARD_SECRET}", events: ["payment.*", ""]}`, "events[1]: event pattern is empty"},
		{"inner wildcard", `{url: "http://h/", secret: "${FORWARD_SECRET}", events: ["pay*.x"]}`, "'*' is allowed only at the end"},
		{"null entry", `~`, "empty definition"},
		{"unknown key", `{url: "http://h/", secret: "${FORWARD_SECRET}", retries: 3}`, "field retries not found"},
	} {
		// The bad entry is second: the error names its index.
		_, err := parseForward("      - {url: \"http://h/ok\", secret: \"${FORWARD_SECRET}\"}\n      - " + tt.entry + "\n")
		if err == nil {
			t.Errorf("%s: accepted", tt.name)
			continue
		}
		msg := err.Error()
		if !strings.Contains(msg, tt.want) {
			t.Errorf("%s: error %q does not contain %q", tt.name, msg, tt.want)
		}
		if tt.name != "unknown key" && !strings.Contains(msg, `source "payments": forward[1]: `) {
			t.Errorf("%s: error %q does not name the source and destination", tt.name, msg)
		}
		for _, secret := range []string{forwardSecret, strings.TrimPrefix(forwardSecret, "whsec_"), "c2VjcmV0", "p%zz"} {
			if strings.Contains(msg, secret) {
				t.Errorf("%s: error %q shows %q", tt.name, msg, secret)
			}
		}
	}
}

func TestCheckEventPattern(t *testing.T) {
	t.Parallel()
	for p, ok := range map[string]bool{
		"payment.succeeded": true, "payment.*": true, "*": true, "orders/paid": true,
		"": false, "**": false, "*.succeeded": false, "pay*ment": false,
	} {
		if err := config.CheckEventPattern(p); (err == nil) != ok {
			t.Errorf("CheckEventPattern(%q) = %v, want ok %v", p, err, ok)
		}
	}
}

// A YAML type error must not quote the value: after ${VAR} expansion it may
// be a secret (here: a secret given where a list is expected).
func TestDecodeErrorsDoNotQuoteValues(t *testing.T) {
	t.Parallel()
	const (
		long  = "whsec_S3cr3tDoNotLeakMe0123456789"
		short = "hunt2r"           // under yaml's 10-byte cut: quoted whole
		ticks = "a`b`c\nd` into x" // backticks and a newline inside the value
	)
	for _, tt := range []struct {
		name, value, doc string
		want             []string // the error keeps these
	}{
		{"secret as secrets", long, `
sources:
  payments:
    provider: standard
    secrets: ${X}
`, []string{"line 5", "cannot unmarshal !!str a value into []string"}},
		{"short value", short, `
sources:
  payments:
    provider: standard
    secrets: ["` + forwardSecret + `"]
    max_attempts: ${X}
`, []string{"line 6", "a value into int"}},
		{"duration", long, `
sources:
  payments:
    provider: standard
    secrets: ["` + forwardSecret + `"]
    tolerance: ${X}
`, []string{"line 6", "a value into time.Duration"}},
		{"value with backticks", ticks, `
sources:
  payments:
    provider: standard
    secrets: ["` + forwardSecret + `"]
    forward: ${X}
`, []string{"line 6", "a value into []*config.Forward"}},
		{"two errors", long, `
sources:
  payments:
    provider: standard
    secrets: ${X}
    max_attempts: ${X}
    retries: 3
`, []string{"line 5: cannot unmarshal !!str a value into []string", "line 6: cannot unmarshal !!str a value into int", "line 7: field retries not found"}},
		// Lines count in the file, comments and blank lines included, not in
		// the re-encoded document the decoder reads.
		{"file lines", long, `# Sources.

sources:
  # The payments service.
  payments:
    provider: standard

    # From the environment.
    secrets: ${X}
`, []string{"line 9: cannot unmarshal !!str a value into []string"}},
	} {
		_, err := config.Parse([]byte(tt.doc), func(string) string { return tt.value })
		if err == nil {
			t.Errorf("%s: accepted", tt.name)
			continue
		}
		msg := err.Error()
		for _, w := range tt.want {
			if !strings.Contains(msg, w) {
				t.Errorf("%s: error %q does not contain %q", tt.name, msg, w)
			}
		}
		if strings.Contains(msg, "`") {
			t.Errorf("%s: error %q quotes a value", tt.name, msg)
		}
		for _, leak := range []string{tt.value[:4], "S3cr3t", short, "b`c", "d` into x"} {
			if strings.Contains(msg, leak) {
				t.Errorf("%s: error %q shows %q of the value", tt.name, msg, leak)
			}
		}
	}
}

// "unknown" is the metrics label of requests to unconfigured sources: a
// source of that name would be counted with them.
func TestReservedSourceName(t *testing.T) {
	t.Parallel()
	_, err := config.Parse([]byte(`
sources:
  unknown:
    provider: standard
    secrets: ["`+forwardSecret+`"]
`), func(string) string { return "" })
	if err == nil {
		t.Fatal(`a source named "unknown" was accepted`)
	}
	if msg := err.Error(); !strings.Contains(msg, `source "unknown"`) || !strings.Contains(msg, "reserved") || !strings.Contains(msg, "metrics") {
		t.Errorf("error %q: want the source, that the name is reserved, and why", msg)
	}
	if config.ReservedSourceName != labels.UnknownSourceName {
		t.Errorf("ReservedSourceName = %q, labels.UnknownSourceName = %q", config.ReservedSourceName, labels.UnknownSourceName)
	}

	// Names that merely contain it are fine.
	if _, err := config.Parse([]byte(`
sources:
  unknown-shop:
    provider: standard
    secrets: ["`+forwardSecret+`"]
`), func(string) string { return "" }); err != nil {
		t.Errorf("unknown-shop: %v", err)
	}
}

func TestAccountID(t *testing.T) {
	t.Parallel()
	parse := func(account string) (*config.Config, error) {
		return config.Parse([]byte(`
sources:
  stripe-a:
    provider: stripe
    secrets: ["whsec_x"]
    account_id: "`+account+`"
`), func(string) string { return "" })
	}
	cfg, err := parse("acct_1Nv0FGQ9RKHgCVdK")
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.Sources["stripe-a"].AccountID; got != "acct_1Nv0FGQ9RKHgCVdK" {
		t.Errorf("AccountID = %q", got)
	}
	for _, bad := range []string{"acct 1", " acct_1", "acct_\t1"} {
		_, err := parse(bad)
		if err == nil || !strings.Contains(err.Error(), `source "stripe-a": account_id`) {
			t.Errorf("account_id %q: %v, want an error naming the source and key", bad, err)
		}
	}
}

func TestMaxAge(t *testing.T) {
	t.Parallel()
	parse := func(v string) (*config.Config, error) {
		return config.Parse([]byte(`
sources:
  stripe:
    provider: stripe
    secrets: ["whsec_x"]
    max_age: `+v+`
`), func(string) string { return "" })
	}
	cfg, err := parse("96h")
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.Sources["stripe"].MaxAge; got != 96*time.Hour {
		t.Errorf("MaxAge = %s", got)
	}
	if _, err := parse("-1h"); err == nil || !strings.Contains(err.Error(), "max_age") {
		t.Errorf("negative max_age: %v", err)
	}
}

// The generic HMAC source of docs/providers.md, written out, decodes
// strictly and builds a verifier; a misspelt key is an error.
func TestHMACSource(t *testing.T) {
	t.Parallel()
	const src = `
sources:
  acme:
    provider: hmac
    secrets: ["acme-secret"]
    tolerance: 5m
    hmac:
      signature_header: X-Acme-Signature
      algorithm: sha256
      encoding: hex
      pairs: {separator: ",", signature: v1, timestamp: t}
      signed_content: "{timestamp}.{body}"
      delivery_id: {header: X-Acme-Delivery}
      event_type: {json: "type"}
`
	cfg, err := config.Parse([]byte(src), func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	h := cfg.Sources["acme"].HMAC
	if h == nil || h.Pairs == nil || h.Pairs.Signature != "v1" || h.DeliveryID.Header != "X-Acme-Delivery" || h.EventType.JSON != "type" {
		t.Fatalf("hmac = %+v", h)
	}
	if _, err := config.Parse([]byte(strings.Replace(src, "signed_content", "signed_contnet", 1)), func(string) string { return "" }); err == nil {
		t.Error("a misspelt hmac key was accepted")
	}
	if _, err := config.Parse([]byte(strings.Replace(src, "delivery_id: {header: X-Acme-Delivery}", "", 1)), func(string) string { return "" }); err == nil ||
		!strings.Contains(err.Error(), `source "acme"`) || !strings.Contains(err.Error(), "delivery_id") {
		t.Errorf("hmac source without delivery_id: %v", err)
	}
}
