package config_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/inboxhq/inbox/internal/config"
	"github.com/inboxhq/inbox/internal/forward"
)

// Every refusal of a sources file (the backfill section's are in
// TestBackfillSection, the forward list's in TestForwardConfig): each is a
// load error naming the source and what is wrong, never a secret, and
// nothing loads with it.
func TestEveryRefusal(t *testing.T) {
	t.Parallel()
	const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	env := map[string]string{"SECRET": secret, "STRIPE": "whsec_0123456789abcdef0123", "KEY": "sk_live_51SecretValueNeverInErrors0000"}
	// src is a valid standard source with extra lines.
	src := func(name, extra string) string {
		return "  " + name + ":\n    provider: standard\n    secrets: [\"${SECRET}\"]\n" + extra
	}
	for _, tc := range []struct {
		name, yaml, want string
	}{
		{"no sources", "sources: {}\n", "no sources configured"},
		{"an empty source", "sources:\n  a:\n", `source "a": empty definition`},
		{"a misspelt key", "sources:\n" + src("a", "    secret: [x]\n"), "field secret not found"},
		{"a bad name", "sources:\n" + src("Payments", ""), "name must be 1-63 characters"},
		{"the reserved name", "sources:\n" + src(config.ReservedSourceName, ""), "is reserved"},
		{"an unknown provider", "sources:\n  a:\n    provider: paypal\n    secrets: [\"${SECRET}\"]\n", "paypal"},
		{"no secret", "sources:\n  a:\n    provider: standard\n", `source "a"`},
		{"a weak secret", "sources:\n  a:\n    provider: github\n    secrets: [aaaaaaaaaaaaaaaaaaaaaaaa]\n", "distinct characters"},
		{"an unset variable", "sources:\n  a:\n    provider: standard\n    secrets: [\"${NOPE}\"]\n", "environment variable NOPE is not set"},
		{"a negative tolerance", "sources:\n" + src("a", "    tolerance: -1m\n"), "tolerance must not be negative"},
		{"a negative body limit", "sources:\n" + src("a", "    max_body_bytes: -1\n"), "max_body_bytes must not be negative"},
		{"negative max_attempts", "sources:\n" + src("a", "    max_attempts: -1\n"), "max_attempts must not be negative"},
		{"too many attempts", "sources:\n" + src("a", "    max_attempts: 1000\n"), "max_attempts 1000: at most"},
		{"a negative replay window", "sources:\n" + src("a", "    replay_window: -1h\n"), "replay_window must not be negative"},
		{"a negative max_age", "sources:\n" + src("a", "    max_age: -1h\n"), "max_age must not be negative"},
		{"an account id with a space", "sources:\n" + src("a", "    account_id: 'acct 1'\n"), "account_id must be"},
		{"a negative throttle", "sources:\n" + src("a", "    throttle: {per_second: -5}\n"), "throttle.per_second -5"},
		{"a misspelt throttle key", "sources:\n" + src("a", "    throttle: {per_second: 5, key: sourec}\n"), `throttle.key "sourec": want merchant`},
		{"an empty forward", "sources:\n" + src("a", "    forward: [~]\n"), "forward[0]: empty definition"},
		{"a forward mode", "sources:\n" + src("a", "    forward: [{url: 'http://h/', secret: '${SECRET}', mode: beside}]\n"), `mode "beside": want besides or instead`},
		{"a forward timeout", "sources:\n" + src("a", "    forward: [{url: 'http://h/', secret: '${SECRET}', timeout: 2m}]\n"), "exceeds the maximum"},
		{"a forward pattern", "sources:\n" + src("a", "    forward: [{url: 'http://h/', secret: '${SECRET}', events: ['*.paid']}]\n"), "'*' is allowed only at the end"},
		{"a backfill of shopify", "sources:\n  a:\n    provider: shopify\n    secrets: [\"${SECRET}\"]\n    backfill: {}\n", "keeps no log"},
		{"two stripe backfills of one account", "sources:\n" +
			"  a:\n    provider: stripe\n    secrets: [\"${STRIPE}\"]\n    backfill: {api_key: '${KEY}'}\n" +
			"  b:\n    provider: stripe\n    secrets: [\"${STRIPE}\"]\n    backfill: {api_key: '${KEY}'}\n", "both backfill Stripe with no account_id"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg, err := config.Parse([]byte(tc.yaml), func(k string) string { return env[k] })
			require.ErrorContains(t, err, tc.want)
			require.Nil(t, cfg, "nothing loads with a refusal")
			for _, v := range env {
				require.NotContains(t, err.Error(), v, "the error shows a secret")
				require.NotContains(t, err.Error(), strings.TrimPrefix(v, "whsec_"), "the error shows a secret")
			}
		})
	}
}

// Defaults are filled in before the checks, and the checks change nothing:
// a loaded file states every default, and checking it again is a no-op.
func TestDefaultsThenValidate(t *testing.T) {
	t.Parallel()
	cfg, err := config.Parse([]byte(`
sources:
  a:
    provider: standard
    secrets: ["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"]
    throttle: {per_second: 5}
    forward: [{url: 'http://h/', secret: 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw'}]
`), nil)
	require.NoError(t, err)
	s := cfg.Sources["a"]
	require.Equal(t, int64(config.DefaultMaxBodyBytes), int64(s.MaxBodyBytes))
	require.Equal(t, config.ThrottleMerchant, s.Throttle.Key)
	f := *s.Forward[0]
	require.Equal(t, forward.Besides, f.Mode)
	require.Equal(t, forward.DefaultTimeout, f.Timeout)
	require.NoError(t, f.Validate())
	require.Equal(t, f, *s.Forward[0], "Validate changed the destination")
	require.Equal(t, f, f.WithDefaults(), "defaults are idempotent")
	unset := forward.Destination{URL: "http://h/", Secret: f.Secret}
	require.ErrorContains(t, unset.Validate(), `mode "": want besides or instead`, "Validate fills in nothing")
	unset.Mode = forward.Instead
	require.ErrorContains(t, unset.Validate(), "timeout is not set", "Validate fills in nothing")
}
