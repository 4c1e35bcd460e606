package main

import (
	"errors"
	"io"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/inboxhq/inbox/internal/cli"
	"github.com/inboxhq/inbox/internal/config"
)

// parsed returns worker run's options for args, with no environment.
func parsed(t *testing.T, env map[string]string, args ...string) runOptions {
	t.Helper()
	o, err := parseRun(args, func(k string) string { return env[k] }, io.Discard)
	require.NoError(t, err)
	return o
}

// Every rule between worker run's flags that needs no sources file: each
// refusal a usage error naming the flags; the defaults pass.
func TestRunFlagRules(t *testing.T) {
	t.Parallel()
	require.NoError(t, parsed(t, nil).check(), "the defaults")
	pass := map[string]string{"RIVER_BASIC_AUTH_PASS": "a-long-enough-password-for-tests"}
	for _, tc := range []struct {
		env  map[string]string
		args []string
		want string // "" passes
	}{
		{nil, []string{"--console-max-replay", "0"}, "--console-max-replay 0: must be at least 1"},
		{nil, []string{"--partition-width", "12h"}, "--partition-width 12h0m0s: must be 24h or 1h"},
		{nil, []string{"--partition-width", "1h"}, ""},
		{nil, []string{"--max-workers", "0"}, "--max-workers must be at least 1"},
		{nil, []string{"--yield-min-rate", "-1"}, "--yield-min-rate must be 0 (never yield) or more"},
		{nil, []string{"--yield-min-rate", "0"}, ""},
		{nil, []string{"--yield-max-lag", "500ms"}, "--yield-max-lag 500ms: at least 1s"},
		{map[string]string{"WORKER_YIELD_MAX_LAG": "0s"}, nil, "--yield-max-lag 0s: at least 1s"},
		{nil, []string{"--yield-max-lag", "5s"}, ""},
		{nil, []string{"--yield-min-lag", "-1s"}, "--yield-min-lag -1s: 0 or more, and under --yield-max-lag (1m0s)"},
		{nil, []string{"--yield-min-lag", "5s", "--yield-max-lag", "5s"}, "--yield-min-lag 5s: 0 or more, and under --yield-max-lag (5s)"},
		{map[string]string{"WORKER_YIELD_MIN_LAG": "0s"}, nil, ""},
		{nil, []string{"--yield-min-lag", "4s", "--yield-max-lag", "5s"}, ""},
		{nil, []string{"--completed-job-retention", "30s"}, "--completed-job-retention 30s: at least 1m0s"},
		{nil, []string{"--completed-job-retention", "1m"}, ""},
		{nil, []string{"--batch-size", "61"}, "--batch-size must be 1 to 60"},
		{nil, []string{"--batch-concurrency", "0"}, "--batch-concurrency and --forward-concurrency at least 1"},
		{nil, []string{"--forward-concurrency", "0"}, "--batch-concurrency and --forward-concurrency at least 1"},
		{nil, []string{"--purge-interval", "30s"}, "--purge-interval must be 0 (off) or at least 1m"},
		{nil, []string{"--purge-interval", "0"}, ""},
		{nil, []string{"--purge-batch-size", "0"}, "must be positive"},
		{nil, []string{"--purge-body-after", "48h", "--purge-delete-after", "24h"}, "tombstones must outlive bodies"},
		{nil, []string{"--console"}, "need RIVER_BASIC_AUTH_PASS"},
		{map[string]string{"WORKER_RIVERUI": "true"}, nil, "need RIVER_BASIC_AUTH_PASS"},
		{pass, []string{"--riverui"}, ""},
		{pass, []string{"--riverui", "--admin-addr", ""}, "and an --admin-addr"},
	} {
		err := parsed(t, tc.env, tc.args...).check()
		if tc.want == "" {
			require.NoError(t, err, tc.args)
			continue
		}
		require.ErrorContains(t, err, tc.want, tc.args)
		require.True(t, errors.As(err, new(cli.UsageError)), "%v: a usage error", tc.args)
	}
}

// The rules between the flags and the sources file: the reconcile window
// within the tombstone window, the tombstone window past every provider's
// redelivery window, the rescue delay past the longest reconcile (and its
// default set from it), the forward timeouts within the job timeout.
func TestRunSourcesRules(t *testing.T) {
	t.Parallel()
	load := func(yaml string) *config.Config {
		cfg, err := config.Parse([]byte("sources:\n"+yaml), func(string) string { return "" })
		require.NoError(t, err)
		return cfg
	}
	stripe := "  stripe:\n    provider: stripe\n    secrets: [\"whsec_cmd_run_rules_0123456789\"]\n"
	for _, tc := range []struct {
		name, yaml string
		args       []string
		want       string
		rescue     time.Duration // the rescue delay when it passes (0: not checked)
	}{
		{"plain", stripe, nil, "", 0},
		{"reconcile window past the tombstones", stripe + "    backfill: {api_key: sk_test_x, every: 1h, window: 72h}\n",
			[]string{"--purge-body-after", "24h", "--purge-delete-after", "48h"}, "backfill window 72h0m0s is not shorter than --purge-delete-after 48h0m0s", 0},
		{"tombstones shorter than Stripe's redeliveries", stripe, []string{"--purge-body-after", "24h", "--purge-delete-after", "48h"}, "redelivery window", 0},
		{"rescue within a reconcile", stripe + "    backfill: {api_key: sk_test_x, every: 1h, timeout: 10m}\n",
			[]string{"--rescue-after", "5m"}, "--rescue-after 5m must exceed the longest backfill timeout 10m", 0},
		{"rescue defaults past the reconcile", stripe + "    backfill: {api_key: sk_test_x, every: 1h, timeout: 10m}\n", nil, "", 11 * time.Minute},
		{"forward timeouts past the job timeout", stripe + "    forward:\n      - {url: \"https://a.example/hook\", secret: \"whsec_MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3\", timeout: 40s}\n      - {url: \"https://b.example/hook\", secret: \"whsec_MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3\", timeout: 30s}\n",
			nil, "forward timeouts of one source add up to 1m10s, not less than --job-timeout 1m0s", 0},
	} {
		o, err := parsed(t, nil, tc.args...).checkSources(load(tc.yaml))
		if tc.want == "" {
			require.NoError(t, err, tc.name)
			if tc.rescue != 0 {
				require.Equal(t, tc.rescue, o.rescueAfter, tc.name)
			}
			continue
		}
		require.ErrorContains(t, err, tc.want, tc.name)
		require.True(t, errors.As(err, new(cli.UsageError)), "%s: a usage error", tc.name)
	}
}

// --handlers names optional handler packages built into the binary: known
// ones are registered (once each), an unknown one is a usage error listing
// the known ones, and none are on by default.
func TestRunHandlersFlag(t *testing.T) {
	t.Parallel()
	require.Empty(t, parsed(t, nil).handlers, "none by default")
	require.Equal(t, []string{"customers"}, parsed(t, nil, "--handlers", "customers, customers").handlers)
	require.Equal(t, []string{"customers"}, parsed(t, map[string]string{"WORKER_HANDLERS": "customers"}).handlers)
	_, err := parseRun([]string{"--handlers", "customers,crm"}, func(string) string { return "" }, io.Discard)
	var usage cli.UsageError
	require.ErrorAs(t, err, &usage)
	require.ErrorContains(t, err, `unknown handler package "crm" (built into this binary: customers)`)

	_, routed := builtinRegistry(nil).Lookup("standard", "customer.created")
	require.False(t, routed, "without --handlers a customer event stays ignored")
	_, routed = builtinRegistry([]string{"customers"}).Lookup("standard", "customer.created")
	require.True(t, routed)
}
