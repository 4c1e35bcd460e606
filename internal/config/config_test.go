package config_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/inboxhq/inbox/internal/config"
	"github.com/inboxhq/inbox/internal/forward"
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
	require.NoError(t, err)
	fw := cfg.Sources["payments"].Forward
	require.Len(t, fw, 2, "destinations")
	if fw[0].Mode != forward.Besides || fw[0].Timeout != forward.DefaultTimeout || fw[0].Secret != forwardSecret || len(fw[0].Events) != 0 {
		t.Errorf("first destination = %+v, want besides, 10s, the expanded secret, every event", *fw[0])
	}
	if fw[1].Mode != forward.Instead || fw[1].Timeout != time.Minute || len(fw[1].Events) != 3 {
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
		if !assert.Error(t, err, "%s: accepted", tt.name) {
			continue
		}
		msg := err.Error()
		assert.Contains(t, msg, tt.want, tt.name)
		if tt.name != "unknown key" {
			assert.Contains(t, msg, `source "payments": forward[1]: `, "%s: the error names the source and destination", tt.name)
		}
		for _, secret := range []string{forwardSecret, strings.TrimPrefix(forwardSecret, "whsec_"), "c2VjcmV0", "p%zz"} {
			assert.NotContains(t, msg, secret, "%s: the error shows a secret", tt.name)
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
`, []string{"line 6", "a value into []*forwardspec.Destination"}},
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
		if !assert.Error(t, err, "%s: accepted", tt.name) {
			continue
		}
		msg := err.Error()
		for _, w := range tt.want {
			assert.Contains(t, msg, w, tt.name)
		}
		assert.NotContains(t, msg, "`", "%s: the error quotes a value", tt.name)
		for _, leak := range []string{tt.value[:4], "S3cr3t", short, "b`c", "d` into x"} {
			assert.NotContains(t, msg, leak, "%s: the error shows part of the value", tt.name)
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
	require.Error(t, err, `a source named "unknown" was accepted`)
	for _, want := range []string{`source "unknown"`, "reserved", "metrics"} { // the source, that the name is reserved, and why
		assert.ErrorContains(t, err, want)
	}
	assert.Equal(t, labels.UnknownSourceName, config.ReservedSourceName, "ReservedSourceName and labels.UnknownSourceName")

	// Names that merely contain it are fine.
	_, err = config.Parse([]byte(`
sources:
  unknown-shop:
    provider: standard
    secrets: ["`+forwardSecret+`"]
`), func(string) string { return "" })
	assert.NoError(t, err, "unknown-shop")
}

func TestAccountID(t *testing.T) {
	t.Parallel()
	parse := func(account string) (*config.Config, error) {
		return config.Parse([]byte(`
sources:
  stripe-a:
    provider: stripe
    secrets: ["whsec_config_test_key_0123456789"]
    account_id: "`+account+`"
`), func(string) string { return "" })
	}
	cfg, err := parse("acct_1Nv0FGQ9RKHgCVdK")
	require.NoError(t, err)
	assert.Equal(t, "acct_1Nv0FGQ9RKHgCVdK", cfg.Sources["stripe-a"].AccountID)
	for _, bad := range []string{"acct 1", " acct_1", "acct_\t1"} {
		_, err := parse(bad)
		assert.ErrorContains(t, err, `source "stripe-a": account_id`, "account_id %q: an error naming the source and key", bad)
	}
}

func TestMaxAge(t *testing.T) {
	t.Parallel()
	parse := func(v string) (*config.Config, error) {
		return config.Parse([]byte(`
sources:
  stripe:
    provider: stripe
    secrets: ["whsec_config_test_key_0123456789"]
    max_age: `+v+`
`), func(string) string { return "" })
	}
	cfg, err := parse("96h")
	require.NoError(t, err)
	assert.Equal(t, 96*time.Hour, cfg.Sources["stripe"].MaxAge)
	_, err = parse("-1h")
	assert.ErrorContains(t, err, "max_age", "negative max_age")
}

// max_attempts is at most River's default: replayed and reconciled jobs
// carry it, and the worker applies the lower limit, so a higher one could
// not hold for them.
func TestMaxAttemptsBound(t *testing.T) {
	t.Parallel()
	parse := func(v string) (*config.Config, error) {
		return config.Parse([]byte(`
sources:
  stripe:
    provider: stripe
    secrets: ["whsec_config_test_key_0123456789"]
    max_attempts: `+v+`
`), func(string) string { return "" })
	}
	cfg, err := parse("25")
	require.NoError(t, err)
	assert.Equal(t, config.MaxMaxAttempts, cfg.Sources["stripe"].MaxAttempts)
	_, err = parse("26")
	assert.ErrorContains(t, err, `source "stripe": max_attempts 26: at most 25`)
	_, err = parse("-1")
	assert.ErrorContains(t, err, "max_attempts must not be negative")
}

// The generic HMAC source of docs/providers.md, written out, decodes
// strictly and builds a verifier; a misspelt key is an error.
func TestHMACSource(t *testing.T) {
	t.Parallel()
	const src = `
sources:
  acme:
    provider: hmac
    secrets: ["acme-secret-0123456789abcdef"]
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
	require.NoError(t, err)
	h := cfg.Sources["acme"].HMAC
	if h == nil || h.Pairs == nil || h.Pairs.Signature != "v1" || h.DeliveryID.Header != "X-Acme-Delivery" || h.EventType.JSON != "type" {
		t.Fatalf("hmac = %+v", h)
	}
	_, err = config.Parse([]byte(strings.Replace(src, "signed_content", "signed_contnet", 1)), func(string) string { return "" })
	assert.Error(t, err, "a misspelt hmac key was accepted")
	_, err = config.Parse([]byte(strings.Replace(src, "delivery_id: {header: X-Acme-Delivery}", "", 1)), func(string) string { return "" })
	assert.ErrorContains(t, err, `source "acme"`, "hmac source without delivery_id")
	assert.ErrorContains(t, err, "delivery_id", "hmac source without delivery_id")
}

// Configuration refuses what cannot be secure (issue 22), each with a
// message that names the source and the key, never a secret's value.
func TestConfigurationRefusesWhatCannotBeSecure(t *testing.T) {
	t.Parallel()
	const good = "whsec_config_test_key_0123456789"
	cases := []struct {
		name, yaml string
		want       []string
	}{
		{"hmac timestamp not signed", `
  acme:
    provider: hmac
    secrets: ["acme-secret-0123456789abcdef"]
    hmac:
      signature_header: X-Acme-Signature
      timestamp_header: X-Acme-Timestamp
      signed_content: "{body}"
      delivery_id: {header: X-Acme-Delivery}`, []string{`source "acme"`, "timestamp_header", "{timestamp}"}},
		{"hmac pairs timestamp not signed", `
  acme:
    provider: hmac
    secrets: ["acme-secret-0123456789abcdef"]
    hmac:
      signature_header: X-Acme-Signature
      pairs: {separator: ",", signature: v1, timestamp: t}
      delivery_id: {header: X-Acme-Delivery}`, []string{`source "acme"`, "pairs.timestamp", "{timestamp}"}},
		{"stripe whsec_ alone", `
  stripe:
    provider: stripe
    secrets: ["whsec_"]`, []string{`source "stripe"`, "secret 1", "empty, public key"}},
		{"standard empty key", `
  payments:
    provider: standard
    secrets: ["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "whsec_"]`, []string{`source "payments"`, "secret 2"}},
		{"short secret", `
  gh:
    provider: github
    secrets: ["s3cret!"]`, []string{`source "gh"`, "secret 1", "7-byte key: at least 16"}},
		{"1-byte standard key", `
  payments:
    provider: standard
    secrets: ["whsec_QQ=="]`, []string{`source "payments"`, "secret 1", "1-byte key"}},
		{"repeated pattern", `
  shop:
    provider: shopify
    secrets: ["abababababababababababab"]`, []string{`source "shop"`, "secret 1", "2 distinct characters"}},
		{"throttle rate negative", `
  stripe:
    provider: stripe
    secrets: ["` + good + `"]
    throttle: {per_second: -5}`, []string{`source "stripe"`, "throttle.per_second -5", "positive"}},
		{"throttle rate zero", `
  stripe:
    provider: stripe
    secrets: ["` + good + `"]
    throttle: {per_second: 0, key: source}`, []string{`source "stripe"`, "throttle.per_second 0"}},
		{"throttle key unknown", `
  stripe:
    provider: stripe
    secrets: ["` + good + `"]
    throttle: {per_second: 5, key: sourec}`, []string{`source "stripe"`, `throttle.key "sourec"`, "merchant", "source"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := config.Parse([]byte("sources:"+tc.yaml+"\n"), func(string) string { return "" })
			require.Error(t, err)
			for _, w := range tc.want {
				require.ErrorContains(t, err, w)
			}
			for _, secret := range []string{"s3cret!", "abababab", "QQ=="} {
				require.NotContains(t, err.Error(), secret, "never quotes a secret")
			}
		})
	}
	// The same sources, made secure, load.
	_, err := config.Parse([]byte(`sources:
  stripe:
    provider: stripe
    secrets: ["`+good+`"]
    throttle: {per_second: 5, key: source}
  acme:
    provider: hmac
    secrets: ["acme-secret-0123456789abcdef"]
    hmac:
      signature_header: X-Acme-Signature
      timestamp_header: X-Acme-Timestamp
      signed_content: "{timestamp}.{body}"
      delivery_id: {header: X-Acme-Delivery}
`), func(string) string { return "" })
	require.NoError(t, err)
}
