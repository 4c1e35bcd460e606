package backfill_test

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/inboxhq/inbox/internal/backfill"
	"github.com/inboxhq/inbox/internal/pgtest"
)

// stripeMockURL starts Stripe's official API mock server
// (github.com/stripe/stripe-mock) on a free loopback port for the test and
// returns its URL: the binary STRIPE_MOCK names, else pgtest.Tool's
// stripe-mock (skipped when absent, a failure under CI).
func stripeMockURL(t *testing.T) string {
	t.Helper()
	bin := os.Getenv("STRIPE_MOCK")
	if bin == "" {
		bin = pgtest.Tool(t, "stripe-mock", "make tools (scripts/ensure-tools) installs it, or set STRIPE_MOCK")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, bin, "-http-addr", "127.0.0.1:0", "-https-addr", "127.0.0.1:0")
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	cmd.Stderr = cmd.Stdout
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		cancel()
		_ = cmd.Wait()
	})
	addr := make(chan string, 1)
	go func() {
		re := regexp.MustCompile(`Listening for HTTP at address: (127\.0\.0\.1:[0-9]+)`)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if m := re.FindStringSubmatch(sc.Text()); m != nil {
				addr <- m[1]
			}
		}
	}()
	select {
	case a := <-addr:
		return "http://" + a
	case <-time.After(30 * time.Second):
		t.Fatal("stripe-mock did not say where it listens")
		return ""
	}
}

// The client against Stripe's official mock, which validates every request
// against Stripe's OpenAPI spec and answers with its fixtures: the query
// (limit, created[gte], created[lte], starting_after), the headers
// (Stripe-Account, Stripe-Version) and the list decoding hold; the
// fixture's event is stored once, and a second run finds nothing missing;
// an unauthenticated request is refused with Stripe's message.
func TestStripeBackfillAgainstStripeMock(t *testing.T) {
	t.Parallel()
	url := stripeMockURL(t)
	b := setup(t, url, "")
	src := *b.cfg.Sources["stripe"]
	bf := *src.Backfill
	bf.APIURL = url
	bf.APIKey = "sk_test_123"
	src.Backfill = &bf
	since := time.Unix(1234567000, 0) // the fixtures' events are from 2009
	ctx := context.Background()

	res, err := b.runner.Run(ctx, backfill.Request{Source: &src, Since: since, Actor: "mock"})
	require.NoError(t, err)
	require.Equal(t, 1, res.Listed)
	require.Equal(t, 1, res.Stored)
	id := res.Missing[0].ID
	require.True(t, strings.HasPrefix(id, "evt_"), id)
	envs := b.envelopes(t, "stripe")
	require.Equal(t, "backfill", envs[id].Origin)
	require.Equal(t, 1, envs[id].Jobs)
	var typ string
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT event_type FROM envelope WHERE delivery_id = $1`, id).Scan(&typ))
	require.Equal(t, res.Missing[0].Type, typ)

	res, err = b.runner.Run(ctx, backfill.Request{Source: &src, Since: since, Actor: "mock"})
	require.NoError(t, err)
	require.Equal(t, [2]int{1, 0}, [2]int{res.Listed, res.Found})

	// Connect and a pinned API version: accepted by the spec's validation.
	bf.Accounts, bf.APIVersion = []string{"acct_123"}, "2024-06-20"
	res, err = b.runner.Run(ctx, backfill.Request{Source: &src, Since: since, DryRun: true, Actor: "mock"})
	require.NoError(t, err)
	require.Equal(t, 1, res.Listed)

	// Event types, both ways Stripe takes them.
	for _, events := range [][]string{{"plan.created", "charge.refunded"}, {"plan.*"}} {
		bf.Events = events
		_, err = b.runner.Run(ctx, backfill.Request{Source: &src, Since: since, DryRun: true, Actor: "mock"})
		require.NoError(t, err, "%v", events)
	}
	bf.Events = nil

	// The window's end is asked for: nothing since a minute ago.
	res, err = b.runner.Run(ctx, backfill.Request{Source: &src, Since: time.Now().Add(-time.Minute), DryRun: true, Actor: "mock"})
	require.NoError(t, err)
	require.Zero(t, res.Listed, "an event outside the window is not listed")

	bf.APIKey = "not a key"
	_, err = b.runner.Run(ctx, backfill.Request{Source: &src, Since: since, Actor: "mock"})
	require.ErrorContains(t, err, "Stripe API answered 401 Unauthorized (invalid_request_error)")
	require.NotContains(t, err.Error(), "not a key")
}
