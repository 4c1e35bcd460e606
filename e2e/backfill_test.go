package e2e

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/inboxhq/inbox/internal/pgtest"
	"github.com/inboxhq/inbox/internal/provider"
	"github.com/inboxhq/inbox/internal/webhooktest"
)

// An outage longer than Stripe's retries, recovered: two payments never
// reached ingest, one did. `worker backfill` (the binary, as an inbox_admin
// member) lists the account's events from a local Stripe API and stores the
// two; the running worker posts them to the ledger; Stripe's late webhooks
// of the same events are then 200 duplicates and post nothing again.
func TestBackfillRecoversAnOutageEndToEnd(t *testing.T) {
	t.Parallel()
	dbURL := pgtest.NewURL(t)
	s := startStack(t, dbURL)
	bodies := map[string][]byte{
		"evt_e2e_bf_1": webhooktest.StripePayment("evt_e2e_bf_1", "pi_e2e_bf_1", 1500, "usd"),
		"evt_e2e_bf_2": webhooktest.StripePayment("evt_e2e_bf_2", "pi_e2e_bf_2", 2500, "usd"),
		"evt_e2e_bf_3": webhooktest.StripePayment("evt_e2e_bf_3", "pi_e2e_bf_3", 3500, "usd"),
	}
	// webhooktest's events are from 2023: list them with a window that
	// starts before (Stripe's API filters by created; this fake does not).
	const key = "sk_test_51E2eBackfillKey0000000000000000000"
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/events" || r.Header.Get("Authorization") != "Bearer "+key {
			w.WriteHeader(http.StatusUnauthorized)
			fmt.Fprint(w, `{"error": {"type": "invalid_request_error", "message": "Invalid API Key provided"}}`)
			return
		}
		fmt.Fprintf(w, `{"object": "list", "data": [%s, %s, %s], "has_more": false, "url": "/v1/events"}`,
			bodies["evt_e2e_bf_3"], bodies["evt_e2e_bf_2"], bodies["evt_e2e_bf_1"])
	}))
	t.Cleanup(api.Close)

	stripeDelivery := func(id string) webhooktest.Delivery {
		return webhooktest.Delivery{Provider: provider.Stripe, Secret: e2eSecrets["E2E_STRIPE_SECRET"], Body: bodies[id]}
	}
	code, err := s.send(stripeDelivery("evt_e2e_bf_2"), "stripe")
	require.NoError(t, err)
	require.Equal(t, http.StatusAccepted, code)

	cfg := filepath.Join(t.TempDir(), "backfill.yaml")
	require.NoError(t, os.WriteFile(cfg, []byte(`
sources:
  stripe:
    provider: stripe
    secrets: ["${E2E_STRIPE_SECRET}"]
    backfill:
      api_key: ${E2E_STRIPE_API_KEY}
      api_url: `+api.URL+`
`), 0o600))
	env := append(slices.Clip(s.env), "INBOX_CONFIG="+cfg, "E2E_STRIPE_API_KEY="+key,
		"DATABASE_URL="+pgtest.RoleURL(t, dbURL, pgtest.RoleAdmin))
	since := time.Unix(1699990000, 0).UTC().Format(time.RFC3339)
	p, _ := start(t, "worker", env, "backfill", "--source", "stripe", "--since", since, "--actor", "e2e", "--force") // its recorded events are from 2023: past the delete horizon
	select {
	case <-p.done:
	case <-time.After(60 * time.Second):
		t.Fatal("worker backfill did not finish")
	}
	require.NoError(t, p.err, p.out.String())
	text := p.out.String() // its summary (stdout) and log (stderr)
	require.Regexp(t, `listed\s+3`, text)
	require.Regexp(t, `missing\s+2 \(no envelope\)`, text)
	require.Regexp(t, `never delivered\s+2 \(older than the provider's retry window\)`, text)
	require.Contains(t, text, "warning: --since is older than the purge's delete horizon")
	require.Regexp(t, `stored\s+2`, text)
	require.NotContains(t, text, key)

	eventually(t, 60*time.Second, "the backfilled payments posted", func(ctx context.Context) (bool, string) {
		var done, posted int
		if err := s.pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE status = 'done'), (SELECT count(*) FROM ledger_transaction) FROM envelope`).Scan(&done, &posted); err != nil {
			return false, err.Error()
		}
		return done == 3 && posted == 3, fmt.Sprintf("%d done, %d posted", done, posted)
	})
	require.EqualValues(t, 2, s.scalar(t, `SELECT count(*) FROM envelope WHERE origin = 'backfill' AND backfill_run_id IS NOT NULL`))
	require.EqualValues(t, 7500, s.scalar(t, `SELECT sum(amount_minor) FROM ledger_entry WHERE amount_minor > 0`))

	// Stripe's endpoint is back: its late deliveries of the same events.
	for _, id := range []string{"evt_e2e_bf_1", "evt_e2e_bf_3"} {
		code, err := s.send(stripeDelivery(id), "stripe")
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, code, "%s: a duplicate", id)
	}
	require.EqualValues(t, 2, s.scalar(t, `SELECT count(*) FROM envelope_duplicate`))
	require.EqualValues(t, 0, s.scalar(t, `SELECT count(*) FROM envelope_conflict`))
	requireOneJobEachDeleted(t, s, 3) // the late deliveries, duplicates, enqueued nothing
	require.EqualValues(t, 3, s.scalar(t, `SELECT count(*) FROM ledger_transaction`))
}
