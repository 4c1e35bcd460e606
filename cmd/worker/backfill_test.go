package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/inboxhq/inbox/internal/envelope/envelopetest"
	"github.com/inboxhq/inbox/internal/pgtest"
)

const backfillKey = "sk_test_51CmdBackfillKey000000000000000000"

// backfillFixture writes a sources file whose stripe source lists its
// events from a fake Stripe API serving events (one page), and returns the
// file and a getenv for it.
func backfillFixture(t *testing.T, dbURL string, events ...string) func(string) string {
	t.Helper()
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+backfillKey {
			w.WriteHeader(http.StatusUnauthorized)
			fmt.Fprint(w, `{"error": {"type": "invalid_request_error", "message": "Invalid API Key provided: sk_test_****0000"}}`)
			return
		}
		fmt.Fprintf(w, `{"object": "list", "data": [%s], "has_more": false, "url": "/v1/events"}`, strings.Join(events, ","))
	}))
	t.Cleanup(api.Close)
	dir := t.TempDir()
	path := filepath.Join(dir, "sources.yaml")
	require.NoError(t, os.WriteFile(path, []byte(`
sources:
  stripe:
    provider: stripe
    secrets: ["${STRIPE_WEBHOOK_SECRET}"]
    backfill:
      api_key: ${STRIPE_API_KEY}
      api_url: `+api.URL+`
  nolog:
    provider: stripe
    secrets: ["whsec_another_secret_0123456789"]
  shop:
    provider: shopify
    secrets: ["shopify-secret-0123456789abcdef"]
`), 0o600))
	env := map[string]string{"DATABASE_URL": dbURL, "INBOX_CONFIG": path, "STRIPE_WEBHOOK_SECRET": "whsec_cmd_backfill_0123456789", "STRIPE_API_KEY": backfillKey}
	return func(k string) string { return env[k] }
}

func cmdEvent(id string, created time.Time) string {
	return fmt.Sprintf(`{"id": %q, "object": "event", "api_version": "2024-06-20", "created": %d, "data": {"object": {"id": "cus_1", "object": "customer"}}, "livemode": false, "pending_webhooks": 1, "request": {"id": null, "idempotency_key": null}, "type": "customer.created"}`, id, created.Unix())
}

func runBackfillCmd(t *testing.T, getenv func(string) string, args ...string) (string, string, error) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	err := run(context.Background(), append([]string{"backfill"}, args...), getenv, &stdout, &stderr)
	return stdout.String(), stderr.String(), err
}

func TestBackfillUsageErrorsExitWithStatus2(t *testing.T) {
	t.Parallel()
	getenv := backfillFixture(t, "")
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no source", []string{"--since", "24h"}, "--source is required"},
		{"no window", []string{"--source", "stripe"}, "give --since"},
		{"since and resume", []string{"--source", "stripe", "--since", "1h", "--resume", "3"}, "not both"},
		{"bad since", []string{"--source", "stripe", "--since", "yesterday"}, "--since"},
		{"unknown source", []string{"--source", "nope", "--since", "1h"}, `no source "nope"`},
		{"shopify", []string{"--source", "shop", "--since", "1h"}, `cannot backfill source "shop": the provider keeps no log of events or deliveries`},
		{"not configured", []string{"--source", "nolog", "--since", "1h"}, `no backfill section for source "nolog"`},
		{"since before the delete horizon", []string{"--source", "stripe", "--since", "100d"}, "older than the purge's delete horizon (--purge-delete-after 2160h0m0s"},
		{"since before a shorter delete horizon", []string{"--source", "stripe", "--since", "3h", "--purge-delete-after", "2h"}, "older than the purge's delete horizon"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			stdout, _, err := runBackfillCmd(t, getenv, tc.args...)
			require.ErrorContains(t, err, tc.want)
			require.Equal(t, 2, exitCode(err), "%v", err)
			require.Empty(t, stdout)
		})
	}
}

// The command end to end, as the admin role: a dry run lists the missing
// event and stores nothing, the run stores it marked as backfilled, both
// leave their backfill_run row, and progress goes to stderr.
func TestBackfillCommandDryRunThenRun(t *testing.T) {
	t.Parallel()
	b := admSetup(t)
	now := time.Now()
	getenv := backfillFixture(t, b.url, cmdEvent("evt_cmd2", now.Add(-time.Minute)), cmdEvent("evt_cmd1", now.Add(-2*time.Minute)))
	ctx := context.Background()
	envelopetest.Insert(t, b.pool, envelopetest.Row{Source: "stripe", Provider: "stripe", DeliveryID: "evt_cmd1",
		EventType: "customer.created", Body: []byte(`{}`), NoPayload: true})

	stdout, stderr, err := runBackfillCmd(t, getenv, "--source", "stripe", "--since", "24h", "--dry-run", "--actor", "oncall")
	require.NoError(t, err, stderr)
	require.Contains(t, stdout, "dry run:")
	require.Regexp(t, `listed\s+2\n`, stdout)
	require.Regexp(t, `missing\s+1 \(no envelope\)`, stdout)
	require.Regexp(t, `not yet delivered\s+1 \(within the provider's retry window`, stdout)
	require.Regexp(t, `evt_cmd2\s+customer.created`, stdout)
	require.NotContains(t, stdout, "evt_cmd1")
	require.Contains(t, stderr, "backfill: page 1")
	require.Equal(t, 1, pgtest.Count(t, b.pool, `SELECT count(*) FROM envelope`))

	stdout, stderr, err = runBackfillCmd(t, getenv, "--source", "stripe", "--since", "24h", "--json")
	require.NoError(t, err, stderr)
	var res struct {
		RunID  int64 `json:"run_id"`
		Stored int   `json:"stored"`
	}
	require.NoError(t, json.Unmarshal([]byte(stdout), &res))
	require.Equal(t, 1, res.Stored)
	var origin string
	var runID int64
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT origin, backfill_run_id FROM envelope WHERE delivery_id = 'evt_cmd2'`).Scan(&origin, &runID))
	require.Equal(t, "backfill", origin)
	require.Equal(t, res.RunID, runID)
	var envID int64
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT id FROM envelope WHERE delivery_id = 'evt_cmd2'`).Scan(&envID))
	show, _, err := b.run(t, "envelopes", "show", fmt.Sprint(envID))
	require.NoError(t, err)
	require.Regexp(t, fmt.Sprintf(`origin\s+backfill \(backfill_run %d: listed from the provider's log, no webhook of it had arrived\)`, runID), show)
	rows, err := b.pool.Query(ctx, `SELECT format('%s %s %s %s/%s/%s', actor, dry_run, status, listed, found, stored) FROM backfill_run ORDER BY id`)
	require.NoError(t, err)
	var got []string
	for rows.Next() {
		var s string
		require.NoError(t, rows.Scan(&s))
		got = append(got, s)
	}
	require.Equal(t, []string{"oncall t done 2/1/0", currentActor(getenv) + " f done 2/1/1"}, got)
}

// A refused key fails the run (exit 1) with Stripe's status and message;
// the key appears nowhere in the output.
func TestBackfillCommandReportsAPIErrorsWithoutTheKey(t *testing.T) {
	t.Parallel()
	b := admSetup(t)
	getenv := backfillFixture(t, b.url)
	wrong := func(k string) string {
		if k == "STRIPE_API_KEY" {
			return "sk_test_51WrongCmdKey0000000000000000000"
		}
		return getenv(k)
	}
	stdout, stderr, err := runBackfillCmd(t, wrong, "--source", "stripe", "--since", "1h")
	require.ErrorContains(t, err, "Stripe API answered 401 Unauthorized")
	require.ErrorContains(t, err, "--resume")
	require.Equal(t, 1, exitCode(err))
	for _, s := range []string{err.Error(), stdout, stderr} {
		require.NotContains(t, s, "sk_test_51WrongCmdKey")
		require.NotContains(t, s, backfillKey)
	}
	require.Regexp(t, `status\s+failed`, stdout)
}

// --force runs a --since older than the delete horizon, with a warning (it
// then fails here for want of a database).
func TestBackfillForceBeforeTheDeleteHorizonWarns(t *testing.T) {
	t.Parallel()
	getenv := backfillFixture(t, "")
	_, stderr, err := runBackfillCmd(t, getenv, "--source", "stripe", "--since", "3h", "--purge-delete-after", "2h", "--force")
	require.Error(t, err)
	require.NotContains(t, err.Error(), "delete horizon")
	require.Contains(t, stderr, "warning: --since is older than the purge's delete horizon")
}

// worker run refuses a periodic reconcile whose window reaches past the
// purge's delete horizon: purged envelopes would look never delivered.
func TestRunRefusesAReconcileWindowPastTheDeleteHorizon(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "sources.yaml")
	require.NoError(t, os.WriteFile(path, []byte(`
sources:
  stripe:
    provider: stripe
    secrets: ["whsec_cmd_backfill_0123456789"]
    backfill: {api_key: sk_test_x, every: 1h, window: 72h}
`), 0o600))
	getenv := func(k string) string { return map[string]string{"INBOX_CONFIG": path}[k] }
	var stdout, stderr bytes.Buffer
	err := run(context.Background(), []string{"run", "--purge-body-after", "24h", "--purge-delete-after", "48h"}, getenv, &stdout, &stderr)
	require.ErrorContains(t, err, `source "stripe": backfill window 72h0m0s is not shorter than --purge-delete-after 48h0m0s`)
	require.Equal(t, 2, exitCode(err))
}

// River rescues every job kind after one delay: a --rescue-after not past
// the longest reconcile timeout would rescue a reconcile still running.
func TestRunRefusesARescueShorterThanTheReconcileTimeout(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "sources.yaml")
	require.NoError(t, os.WriteFile(path, []byte(`
sources:
  stripe:
    provider: stripe
    secrets: ["whsec_cmd_backfill_0123456789"]
    backfill: {api_key: sk_test_x, every: 1h, timeout: 10m}
`), 0o600))
	getenv := func(k string) string { return map[string]string{"INBOX_CONFIG": path}[k] }
	var stdout, stderr bytes.Buffer
	err := run(context.Background(), []string{"run", "--rescue-after", "5m"}, getenv, &stdout, &stderr)
	require.ErrorContains(t, err, "--rescue-after 5m must exceed the longest backfill timeout 10m")
	require.Equal(t, 2, exitCode(err))
}

// worker run refuses a tombstone window (--purge-delete-after) not longer
// than a configured provider's redelivery window: a resend after the drop
// would be processed twice. GitHub never retries, but redelivers by hand
// for 3 days.
func TestRunRefusesATombstoneWindowShorterThanARedelivery(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ provider, secret, deleteAfter, want string }{
		{"stripe", "whsec_cmd_tombstone_0123456789", "72h", `source "src": --purge-delete-after 3d is not longer than stripe's redelivery window 3d`},
		{"github", "gh_cmd_tombstone_0123456789", "48h", `source "src": --purge-delete-after 2d is not longer than github's redelivery window 3d`},
	} {
		path := filepath.Join(t.TempDir(), "sources.yaml")
		require.NoError(t, os.WriteFile(path, []byte(fmt.Sprintf("sources:\n  src:\n    provider: %s\n    secrets: [%q]\n", tc.provider, tc.secret)), 0o600))
		getenv := func(k string) string { return map[string]string{"INBOX_CONFIG": path}[k] }
		var stdout, stderr bytes.Buffer
		err := run(context.Background(), []string{"run", "--purge-body-after", "24h", "--purge-delete-after", tc.deleteAfter}, getenv, &stdout, &stderr)
		require.ErrorContains(t, err, tc.want, tc.provider)
		require.Equal(t, 2, exitCode(err))
	}
}
