package config_test

import (
	"bytes"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/inboxhq/inbox/internal/backfill/backfillspec"
	"github.com/inboxhq/inbox/internal/config"
)

func TestBackfillSection(t *testing.T) {
	t.Parallel()
	env := map[string]string{"KEY": "sk_live_51SecretValueNeverInErrors0000", "TOKEN": "ghp_SecretTokenNeverInErrors000000"}
	getenv := func(k string) string { return env[k] }
	parse := func(provider, secret, backfill string) (*config.Config, error) {
		return config.Parse([]byte("sources:\n  s:\n    provider: "+provider+"\n    secrets: [\""+secret+"\"]\n    backfill: "+backfill+"\n"), getenv)
	}
	const stripe, github, shopify = "whsec_0123456789abcdef0123", "github-secret-0123456789ab", "shopify-secret-0123456789ab"

	cfg, err := parse("stripe", stripe, "{api_key: '${KEY}', accounts: [acct_1Abc], every: 1h}")
	require.NoError(t, err)
	b := cfg.Sources["s"].Backfill
	require.Equal(t, env["KEY"], b.APIKey)
	require.Equal(t, 80*time.Hour, b.Window, "default: Stripe's retry window + 8 h")
	require.Equal(t, backfillspec.DefaultReconcileTimeout, b.Timeout)
	cfg, err = parse("stripe", stripe, "{api_key: '${KEY}', every: 1h45m, window: 2h, timeout: 30m}")
	require.NoError(t, err, "every = window - lag")
	require.Equal(t, 30*time.Minute, cfg.Sources["s"].Backfill.Timeout)
	cfg, err = parse("github", github, "{token: '${TOKEN}', repo: octo/repo, hook_id: 7}")
	require.NoError(t, err)
	require.Equal(t, 24*time.Hour, cfg.Sources["s"].Backfill.Window)

	for _, tc := range []struct{ provider, secret, backfill, want string }{
		{"shopify", shopify, "{api_key: x}", "keeps no log of events or deliveries"},
		{"stripe", stripe, "{}", "api_key is required"},
		{"stripe", stripe, "{api_key: '${KEY}', events: ['charge.*', charge.refunded]}", "must be the only entry"},
		{"stripe", stripe, "{api_key: '${KEY}', events: ['']}", "events[0]"},
		{"stripe", stripe, "{api_key: '${KEY}', accounts: [bob]}", "accounts[0]"},
		{"stripe", stripe, "{api_key: '${KEY}', repo: a/b}", "for github sources"},
		{"stripe", stripe, "{api_key: '${KEY}', every: 10s}", "every must be at least 1m"},
		{"stripe", stripe, "{api_key: '${KEY}', api_url: 'ftp://x'}", "api_url"},
		{"github", github, "{token: '${TOKEN}', repo: octo, hook_id: 1}", "repo: want owner/name"},
		{"github", github, "{token: '${TOKEN}', repo: octo/repo}", "hook_id and one of repo"},
		{"github", github, "{token: '${TOKEN}', repo: octo/repo, org: octo, hook_id: 1}", "one of repo (owner/name) or org"},
		{"github", github, "{token: '${TOKEN}', org: 'o/x', hook_id: 1}", "org: want"},
		{"standard", "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "{api_key: x}", "only stripe and github"},
		{"stripe", stripe, "{api_key: '${KEY}', hook_id: nope}", "cannot unmarshal"},
		{"stripe", stripe, "{api_key: '${KEY}', every: 2h, window: 2h}", "every 2h0m0s must be at most window - lag (1h45m0s)"},
		{"stripe", stripe, "{api_key: '${KEY}', timeout: -1m}", "must not be negative"},
		{"stripe", stripe, "{api_key: pk_live_publishable}", "want a Stripe secret or restricted key"},
		{"stripe", stripe, "{api_key: whsec_notakey}", "want a Stripe secret or restricted key"},
	} {
		_, err := parse(tc.provider, tc.secret, tc.backfill)
		require.ErrorContains(t, err, tc.want, tc.backfill)
		if tc.want != "cannot unmarshal" {
			require.ErrorContains(t, err, "backfill", tc.backfill)
		}
		require.NotContains(t, err.Error(), env["KEY"])
		require.NotContains(t, err.Error(), env["TOKEN"])
	}
}

// Two backfilled Stripe sources of one account (same account_id, or none)
// would each store the other's events: refused unless both list disjoint
// events.
func TestTwoStripeBackfillsOfOneAccount(t *testing.T) {
	t.Parallel()
	parse := func(a, b string) error {
		_, err := config.Parse([]byte("sources:\n  a:\n    provider: stripe\n    secrets: [whsec_0123456789abcdef0123]\n"+a+
			"  b:\n    provider: stripe\n    secrets: [whsec_0123456789abcdef0123]\n"+b), func(string) string { return "" })
		return err
	}
	bf := func(s string) string { return "    backfill: {api_key: sk_test_x" + s + "}\n" }
	for _, tc := range []struct {
		a, b string
		ok   bool
	}{
		{bf(""), bf(""), false},
		{bf(""), "", true}, // only one is backfilled
		{"    account_id: acct_1\n" + bf(""), "    account_id: acct_2\n" + bf(""), true},
		{"    account_id: acct_1\n" + bf(""), "    account_id: acct_1\n" + bf(""), false},
		{bf(", events: [charge.refunded]"), bf(""), false},
		{bf(", events: [charge.refunded]"), bf(", events: [charge.refunded, invoice.paid]"), false},
		{bf(", events: [charge.refunded]"), bf(", events: [invoice.paid]"), true},
		{bf(", events: ['charge.*']"), bf(", events: [charge.refunded]"), false},
		{bf(", events: ['*.succeeded']"), bf(", events: [payment_intent.succeeded]"), false},
		{bf(", events: ['charge.*']"), bf(", events: ['invoice.*']"), true},
		{bf(", events: ['charge.*']"), bf(", events: ['*']"), false},
	} {
		err := parse(tc.a, tc.b)
		if tc.ok {
			require.NoError(t, err, "%s%s", tc.a, tc.b)
			continue
		}
		require.ErrorContains(t, err, `sources "a" and "b": both backfill Stripe`, "%s%s", tc.a, tc.b)
	}
}

// A backfill section printed (%v, %+v, %#v, %s, of it or of its source) or
// logged shows its settings, never the API key or token.
func TestBackfillPrintsNoCredential(t *testing.T) {
	t.Parallel()
	const key, token = "sk_live_51NeverPrintedKey000000", "ghp_NeverPrintedToken0000000000"
	b := backfillspec.Spec{APIKey: key, Token: token, Repo: "octo/repo", Every: time.Hour}
	src := config.Source{Name: "s", Backfill: &b}
	var buf bytes.Buffer
	slog.New(slog.NewJSONHandler(&buf, nil)).Info("x", "backfill", b, "ptr", &b)
	slog.New(slog.NewTextHandler(&buf, nil)).Info("x", "backfill", b)
	for _, out := range []string{
		fmt.Sprint(b), fmt.Sprintf("%+v", b), fmt.Sprintf("%#v", b), fmt.Sprintf("%s", &b), fmt.Sprintf("%v", &b),
		fmt.Sprintf("%+v", src), buf.String(),
	} {
		require.NotContains(t, out, key)
		require.NotContains(t, out, token)
		require.Contains(t, out, "octo/repo", out)
	}
	require.Contains(t, buf.String(), `"api_key":"[REDACTED]"`)
}
