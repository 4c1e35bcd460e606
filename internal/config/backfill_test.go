package config_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

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
