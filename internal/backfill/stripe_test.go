package backfill_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/inboxhq/inbox/internal/backfill"
	"github.com/inboxhq/inbox/internal/backfill/backfillspec"
	"github.com/inboxhq/inbox/internal/config"
	"github.com/inboxhq/inbox/internal/pgtest"
	"github.com/inboxhq/inbox/internal/provider"
)

// webhookBody is how the backfill stores an event listed from the API:
// indented as Stripe's webhook bodies are.
func webhookBody(t *testing.T, ev json.RawMessage) []byte {
	var out bytes.Buffer
	require.NoError(t, json.Indent(&out, ev, "", "  "))
	return out.Bytes()
}

// Every event with no envelope is stored, with its processing job, marked
// as backfilled by this run; events already delivered are untouched (no
// duplicate row, no second job, the webhook's own bytes); the pages are
// walked with starting_after over the window; the run's row says what it
// found.
func TestStripeBackfillStoresMissingEventsOnly(t *testing.T) {
	t.Parallel()
	now := time.Now().Truncate(time.Second)
	events := stripeEvents(250, "miss", now.Add(-time.Minute))
	fake := newFakeStripe(t, events)
	b := setup(t, fake.srv.URL, "")
	delivered := map[string]bool{}
	for _, i := range []int{0, 7, 100, 101, 249} { // first and last of pages, and across a page boundary
		require.Equal(t, http.StatusAccepted, b.sendStripe(t, events[i]))
		delivered[eventID(t, events[i])] = true
	}
	before := b.envelopes(t, "stripe")

	since := now.Add(-72 * time.Hour)
	res, err := b.runner.Run(context.Background(), backfill.Request{Source: b.cfg.Sources["stripe"], Since: since, Actor: "alice"})
	require.NoError(t, err)
	require.Equal(t, backfill.StatusDone, res.Status)
	require.Equal(t, [4]int{250, 245, 245, 0}, [4]int{res.Listed, res.Found, res.Stored, res.Raced})
	require.Len(t, res.Missing, 245)

	got := b.envelopes(t, "stripe")
	require.Len(t, got, 250)
	for _, ev := range events {
		id := eventID(t, ev)
		e := got[id]
		require.Equal(t, 1, e.Jobs, "%s: one processing job", id)
		require.Zero(t, e.Dups, "%s: no duplicate recorded", id)
		if delivered[id] {
			require.Equal(t, before[id], e, "%s: a delivered event is untouched", id)
			require.Equal(t, "webhook", e.Origin)
			continue
		}
		require.Equal(t, "backfill", e.Origin, id)
		require.NotNil(t, e.RunID)
		require.Equal(t, res.RunID, *e.RunID)
		require.Equal(t, string(webhookBody(t, ev)), string(e.Body), "%s: the event as Stripe rendered it", id)
	}
	// The payload, event type and provider are ingest's.
	var typ, prov string
	var amount int64
	require.NoError(t, b.pool.QueryRow(context.Background(), `
		SELECT event_type, provider, (payload->'data'->'object'->>'amount_received')::bigint FROM envelope_with_body WHERE delivery_id = 'evt_miss0002'`).Scan(&typ, &prov, &amount))
	require.Equal(t, []any{"payment_intent.succeeded", "stripe", int64(100 + 248)}, []any{typ, prov, amount})

	// Three pages: the window, 100 a page, each after the last id.
	reqs := fake.requests()
	require.Len(t, reqs, 3)
	for i, r := range reqs {
		require.Equal(t, "Bearer "+stripeKey, r.Auth)
		require.Equal(t, "100", r.Query.Get("limit"))
		require.Equal(t, since.Unix(), mustInt(t, r.Query.Get("created[gte]")))
		require.Equal(t, res.Until.Unix(), mustInt(t, r.Query.Get("created[lte]")))
		want := ""
		if i > 0 {
			want = eventID(t, events[100*i-1])
		}
		require.Equal(t, want, r.Query.Get("starting_after"), "page %d", i)
	}

	row := b.run(t, res.RunID)
	require.True(t, row.Since.Equal(since), "since %s", row.Since)
	require.WithinDuration(t, res.Until, row.Until, time.Millisecond)
	row.Since, row.Until = time.Time{}, time.Time{}
	require.Equal(t, runRow{Source: "stripe", Provider: "stripe", Actor: "alice", Status: "done",
		Listed: 250, Found: 245, Stored: 245, Cursor: ptr(":" + eventID(t, events[249])), Finished: true}, row)
	require.NotContains(t, b.logs.String(), stripeKey)

	// The provider's late webhook of a backfilled event (other bytes than
	// the API's rendering) is a plain duplicate: 200, recorded, no conflict.
	require.Equal(t, http.StatusOK, b.sendStripe(t, events[50]))
	late := b.envelopes(t, "stripe")[eventID(t, events[50])]
	require.Equal(t, [3]any{1, 1, "backfill"}, [3]any{late.Dups, late.Jobs, late.Origin})
	require.Zero(t, pgtest.Count(t, b.pool, `SELECT count(*) FROM envelope_conflict`))
	got = b.envelopes(t, "stripe")

	// Run again: nothing is missing any more.
	res2, err := b.runner.Run(context.Background(), backfill.Request{Source: b.cfg.Sources["stripe"], Since: since, Actor: "alice"})
	require.NoError(t, err)
	require.Equal(t, [3]int{250, 0, 0}, [3]int{res2.Listed, res2.Found, res2.Stored})
	require.Equal(t, got, b.envelopes(t, "stripe"))
}

func mustInt(t *testing.T, s string) int64 {
	var n int64
	require.NoError(t, json.Unmarshal([]byte(s), &n))
	return n
}

func ptr[T any](v T) *T { return &v }

// A recorded page in Stripe's documented JSON: each event is stored with
// exactly its content (indented as a webhook body), its type and its
// nested objects, non-ASCII included. The page is served as recorded,
// with an event created before the window and one after it (the API was
// asked for the window only, but a page says what it says): neither is
// listed nor stored.
func TestStripeBackfillStoresARecordedPageExactly(t *testing.T) {
	t.Parallel()
	page, err := os.ReadFile("testdata/stripe_events_page.json")
	require.NoError(t, err)
	var list struct {
		Data []json.RawMessage `json:"data"`
	}
	require.NoError(t, json.Unmarshal(page, &list))
	outside := map[string]bool{"evt_3QfRecordedF0009": true, "evt_1QfRecordedZ0000": true}
	fake := newFakeStripe(t, list.Data)
	fake.Verbatim = true
	b := setup(t, fake.srv.URL, "")
	res, err := b.runner.Run(context.Background(), backfill.Request{Source: b.cfg.Sources["stripe"], Since: time.Unix(1764546000, 0), Actor: "alice"})
	require.NoError(t, err)
	require.Equal(t, []backfill.Missing{
		{ID: "evt_3QfRecordedC0003", Type: "charge.refunded", Created: time.Unix(1764547200, 0).UTC(), EnvelopeID: res.Missing[0].EnvelopeID},
		{ID: "evt_3QfRecordedB0002", Type: "payment_intent.succeeded", Created: time.Unix(1764547100, 0).UTC(), EnvelopeID: res.Missing[1].EnvelopeID},
		{ID: "evt_1QfRecordedA0001", Type: "customer.created", Created: time.Unix(1764547000, 0).UTC(), EnvelopeID: res.Missing[2].EnvelopeID},
	}, res.Missing)
	require.Equal(t, 3, res.Listed, "the events outside the window are not counted as listed")
	got := b.envelopes(t, "stripe")
	require.Len(t, got, 3)
	for _, ev := range list.Data {
		if outside[eventID(t, ev)] {
			require.NotContains(t, got, eventID(t, ev), "outside the window: not stored")
			continue
		}
		require.Equal(t, string(webhookBody(t, ev)), string(got[eventID(t, ev)].Body))
	}
	var name, typ string
	require.NoError(t, b.pool.QueryRow(context.Background(),
		`SELECT payload->'data'->'object'->>'name', event_type FROM envelope_with_body WHERE delivery_id = 'evt_1QfRecordedA0001'`).Scan(&name, &typ))
	require.Equal(t, "Jenny Rosen é", name)
	require.Equal(t, "customer.created", typ)
}

// A dry run lists what is missing and stores nothing: no envelope, no job;
// its row says dry_run, found, and stored 0.
func TestStripeBackfillDryRunStoresNothing(t *testing.T) {
	t.Parallel()
	now := time.Now()
	events := stripeEvents(30, "dry", now.Add(-time.Hour))
	fake := newFakeStripe(t, events)
	b := setup(t, fake.srv.URL, "")
	require.Equal(t, http.StatusAccepted, b.sendStripe(t, events[3]))
	res, err := b.runner.Run(context.Background(), backfill.Request{Source: b.cfg.Sources["stripe"], Since: now.Add(-24 * time.Hour), DryRun: true, Actor: "bob"})
	require.NoError(t, err)
	require.Equal(t, [3]int{30, 29, 0}, [3]int{res.Listed, res.Found, res.Stored})
	var ids []string
	for _, m := range res.Missing {
		require.Zero(t, m.EnvelopeID)
		ids = append(ids, m.ID)
	}
	require.Len(t, ids, 29)
	require.NotContains(t, ids, eventID(t, events[3]))
	require.Equal(t, eventID(t, events[0]), ids[0])
	require.Len(t, b.envelopes(t, "stripe"), 1)
	require.Equal(t, 1, pgtest.Count(t, b.pool, `SELECT count(*) FROM river_job`), "only the delivered event's job")
	row := b.run(t, res.RunID)
	require.True(t, row.DryRun)
	require.Equal(t, [3]int{30, 29, 0}, [3]int{row.Listed, row.Found, row.Stored})
	require.Equal(t, "done", row.Status)
}

// Webhooks of the same events sent through ingest while the backfill runs
// (while the fake serves each page, so between the backfill's lookup and
// its insert): every event is stored once, with one job, no conflict (the
// webhook's bytes differ from the API's rendering), and every webhook is
// answered 2xx.
func TestStripeWebhookRacingTheBackfillIsStoredOnce(t *testing.T) {
	t.Parallel()
	now := time.Now()
	events := stripeEvents(300, "race", now.Add(-time.Minute))
	fake := newFakeStripe(t, events)
	b := setup(t, fake.srv.URL, "")
	var wg sync.WaitGroup
	codes := make(chan int, len(events))
	fake.PageFunc = func(page []json.RawMessage) {
		for i, ev := range page {
			if i%2 == 0 {
				continue
			}
			wg.Go(func() { codes <- b.sendStripe(t, ev) })
		}
	}
	// And every third event besides, at once, from outside the pages.
	for i := 0; i < len(events); i += 3 {
		wg.Go(func() { codes <- b.sendStripe(t, events[i]) })
	}
	res, err := b.runner.Run(context.Background(), backfill.Request{Source: b.cfg.Sources["stripe"], Since: now.Add(-24 * time.Hour), Actor: "race"})
	require.NoError(t, err)
	wg.Wait()
	close(codes)
	for c := range codes {
		require.Contains(t, []int{http.StatusAccepted, http.StatusOK}, c)
	}
	got := b.envelopes(t, "stripe")
	require.Len(t, got, 300)
	backfilled := 0
	for id, e := range got {
		require.Equal(t, 1, e.Jobs, "%s: one job", id)
		if e.Origin == "backfill" {
			backfilled++
		}
	}
	require.Equal(t, res.Stored, backfilled)
	require.Zero(t, pgtest.Count(t, b.pool, `SELECT count(*) FROM envelope_conflict`))
	require.Equal(t, 300, res.Listed)
	require.Equal(t, res.Found, res.Stored+res.Raced, "every missing event is stored by the run or was by its webhook")
	t.Logf("found %d, stored %d, raced %d", res.Found, res.Stored, res.Raced)
}

// A 429 with Retry-After is waited out, and a connection dropped mid-page is
// retried, both with the same cursor: the run neither restarts nor skips.
func TestStripeRateLimitAndDroppedConnectionAreRetriedFromTheCursor(t *testing.T) {
	t.Parallel()
	now := time.Now()
	events := stripeEvents(150, "rl", now.Add(-time.Minute))
	fake := newFakeStripe(t, events)
	fake.FaultFunc = func(n int, q url.Values, w http.ResponseWriter) bool {
		switch n {
		case 1: // page 2, first try
			w.Header().Set("Retry-After", "7")
			stripeError(w, http.StatusTooManyRequests, "rate_limit_error", "Request rate limit exceeded.")
			return true
		case 2: // page 2, second try: the connection drops mid-answer
			conn, buf, err := w.(http.Hijacker).Hijack()
			require.NoError(t, err)
			buf.WriteString("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 5000\r\n\r\n{\"object\": \"list\", \"data\": [") //nolint:errcheck
			buf.Flush()                                                                                                                            //nolint:errcheck
			conn.Close()
			return true
		}
		return false
	}
	b := setup(t, fake.srv.URL, "")
	res, err := b.runner.Run(context.Background(), backfill.Request{Source: b.cfg.Sources["stripe"], Since: now.Add(-24 * time.Hour), Actor: "rl"})
	require.NoError(t, err)
	require.Equal(t, 150, res.Stored)
	reqs := fake.requests()
	require.Len(t, reqs, 4)
	cursor := eventID(t, events[99])
	require.Equal(t, []string{"", cursor, cursor, cursor}, []string{
		reqs[0].Query.Get("starting_after"), reqs[1].Query.Get("starting_after"), reqs[2].Query.Get("starting_after"), reqs[3].Query.Get("starting_after")})
	sleeps := b.recordedSleeps()
	require.Len(t, sleeps, 2)
	require.Equal(t, 7*time.Second, sleeps[0], "Retry-After honoured")
	require.Less(t, sleeps[1], time.Second, "a backoff after the dropped connection")
	require.Len(t, b.envelopes(t, "stripe"), 150)
}

// A page that keeps failing stops the run after the bounded retries: the
// row is failed, with Stripe's status and message, the cursor of the last
// page stored; resuming that run carries on from the cursor (not from the
// start) and completes the same row.
func TestStripeBackfillResumesFromTheLastCursor(t *testing.T) {
	t.Parallel()
	now := time.Now()
	events := stripeEvents(250, "res", now.Add(-time.Minute))
	fake := newFakeStripe(t, events)
	var failing sync.Mutex
	broken := true
	fake.FaultFunc = func(n int, q url.Values, w http.ResponseWriter) bool {
		failing.Lock()
		defer failing.Unlock()
		if broken && q.Get("starting_after") == eventID(t, events[199]) {
			stripeError(w, http.StatusServiceUnavailable, "api_error", "The server is temporarily unavailable.")
			return true
		}
		return false
	}
	b := setup(t, fake.srv.URL, "")
	src := b.cfg.Sources["stripe"]
	res, err := b.runner.Run(context.Background(), backfill.Request{Source: src, Since: now.Add(-24 * time.Hour), Actor: "carol"})
	require.Error(t, err)
	require.Contains(t, err.Error(), "503")
	require.Contains(t, err.Error(), "The server is temporarily unavailable.")
	require.Equal(t, backfill.StatusFailed, res.Status)
	require.Equal(t, 200, res.Stored)
	row := b.run(t, res.RunID)
	require.Equal(t, "failed", row.Status)
	require.Equal(t, ":"+eventID(t, events[199]), *row.Cursor)
	require.Contains(t, *row.Error, "503")
	require.Equal(t, 4, len(fake.requests())-2, "the third page was tried 1 + MaxRetries times")

	failing.Lock()
	broken = false
	failing.Unlock()
	n := len(fake.requests())
	res2, err := b.runner.Run(context.Background(), backfill.Request{Source: src, Resume: res.RunID, Actor: "carol"})
	require.NoError(t, err)
	require.Equal(t, res.RunID, res2.RunID)
	require.Equal(t, [3]int{250, 250, 250}, [3]int{res2.Listed, res2.Found, res2.Stored})
	require.Equal(t, eventID(t, events[199]), fake.requests()[n].Query.Get("starting_after"), "resumed from the cursor")
	require.Len(t, fake.requests(), n+1)
	row = b.run(t, res.RunID)
	require.Equal(t, "done", row.Status)
	require.Nil(t, row.Error)
	require.Len(t, b.envelopes(t, "stripe"), 250)
}

// A refused key is an error with the status and Stripe's message, and no
// key anywhere: not in the error, not in the logs, not in the run's row.
func TestStripeErrorsNameTheStatusNotTheKey(t *testing.T) {
	t.Parallel()
	fake := newFakeStripe(t, nil)
	b := setup(t, fake.srv.URL, "")
	src := *b.cfg.Sources["stripe"]
	bf := *src.Backfill
	bf.APIKey = "sk_test_51WrongKeyForBackfillTestsxxxxcret"
	src.Backfill = &bf
	res, err := b.runner.Run(context.Background(), backfill.Request{Source: &src, Since: time.Now().Add(-time.Hour), Actor: "dave"})
	require.Error(t, err)
	require.Contains(t, err.Error(), "Stripe API answered 401 Unauthorized (invalid_request_error): Invalid API Key provided: [redacted]")
	for _, s := range []string{err.Error(), b.logs.String(), *b.run(t, res.RunID).Error} {
		require.NotContains(t, s, bf.APIKey)
		require.NotContains(t, s, "sk_test_****cret")
	}
	require.Len(t, fake.requests(), 1, "a 401 is not retried")
}

// Connect: each configured account is listed with its Stripe-Account
// header, and its events are stored with the account in the body (as a
// Connect endpoint's webhooks carry it) and in the headers.
func TestStripeBackfillListsEachConnectAccount(t *testing.T) {
	t.Parallel()
	now := time.Now()
	fake := newFakeStripe(t, nil)
	fake.events["acct_1Alpha"] = stripeEvents(3, "alpha", now.Add(-time.Minute))
	fake.events["acct_1Beta"] = stripeEvents(2, "beta", now.Add(-time.Minute))
	b := setup(t, fake.srv.URL, "")
	src := *b.cfg.Sources["stripe"]
	bf := *src.Backfill
	bf.Accounts = []string{"acct_1Alpha", "acct_1Beta"}
	bf.APIVersion = "2024-06-20"
	src.Backfill = &bf
	res, err := b.runner.Run(context.Background(), backfill.Request{Source: &src, Since: now.Add(-time.Hour), Actor: "erin"})
	require.NoError(t, err)
	require.Equal(t, 5, res.Stored)
	reqs := fake.requests()
	require.Len(t, reqs, 2)
	require.Equal(t, []string{"acct_1Alpha", "acct_1Beta"}, []string{reqs[0].Account, reqs[1].Account})
	require.Equal(t, "2024-06-20", reqs[0].Version)
	var acct, hdr string
	require.NoError(t, b.pool.QueryRow(context.Background(),
		`SELECT payload->>'account', headers->>'Stripe-Account' FROM envelope_with_body WHERE delivery_id = 'evt_beta0001'`).Scan(&acct, &hdr))
	require.Equal(t, []string{"acct_1Beta", "acct_1Beta"}, []string{acct, hdr})
	body := string(b.envelopes(t, "stripe")["evt_beta0001"].Body)
	require.True(t, strings.HasPrefix(body, "{\n  \"account\": \"acct_1Beta\",\n  \"id\": \"evt_beta0001\","), body)
}

// Shopify has no delivery log: the run says so, and writes no row.
func TestShopifyCannotBeBackfilled(t *testing.T) {
	t.Parallel()
	b := setup(t, "http://127.0.0.1:1", "")
	_, err := b.runner.Run(context.Background(), backfill.Request{Source: b.cfg.Sources["shop"], Since: time.Now().Add(-time.Hour), Actor: "x"})
	require.ErrorIs(t, err, backfill.ErrUnsupported)
	require.Contains(t, err.Error(), "keeps no log")
	require.Zero(t, pgtest.Count(t, b.pool, `SELECT count(*) FROM backfill_run`))
}

// events: only the types the endpoint is subscribed to are listed (types[],
// or type with a wildcard), so events it was never sent are neither stored
// nor counted as missing.
func TestStripeBackfillListsOnlyTheEndpointsEventTypes(t *testing.T) {
	t.Parallel()
	page, err := os.ReadFile("testdata/stripe_events_page.json")
	require.NoError(t, err)
	var list struct {
		Data []json.RawMessage `json:"data"`
	}
	require.NoError(t, json.Unmarshal(page, &list))
	fake := newFakeStripe(t, list.Data)
	b := setup(t, fake.srv.URL, "")
	for _, tc := range []struct {
		events []string
		want   []string
	}{
		{[]string{"payment_intent.succeeded", "charge.refunded"}, []string{"evt_3QfRecordedC0003", "evt_3QfRecordedB0002"}},
		{[]string{"customer.*"}, []string{"evt_1QfRecordedA0001"}},
	} {
		src := *b.cfg.Sources["stripe"]
		bf := *src.Backfill
		bf.Events = tc.events
		src.Backfill = &bf
		res, err := b.runner.Run(context.Background(), backfill.Request{Source: &src, Since: time.Unix(1764546000, 0), DryRun: true, Actor: "gina"})
		require.NoError(t, err)
		var got []string
		for _, m := range res.Missing {
			got = append(got, m.ID)
		}
		require.Equal(t, tc.want, got, "%v", tc.events)
		q := fake.requests()[len(fake.requests())-1].Query
		if len(tc.events) > 1 {
			require.Equal(t, tc.events, q["types[]"])
		} else {
			require.Equal(t, tc.events[0], q.Get("type"))
		}
	}
}

// An event whose livemode is not the key's mode (a live event listed with a
// test key, or one with no livemode) is refused: counted, reported, never
// stored. A non-default api_url is warned of.
func TestStripeBackfillRefusesEventsOfTheOtherMode(t *testing.T) {
	t.Parallel()
	now := time.Now().Truncate(time.Second)
	events := stripeEvents(4, "mode", now.Add(-time.Minute))
	events[1] = json.RawMessage(strings.Replace(string(events[1]), `"livemode": false`, `"livemode": true`, 1))
	events[2] = json.RawMessage(strings.Replace(string(events[2]), `"livemode": false,`, ``, 1))
	fake := newFakeStripe(t, events)
	b := setup(t, fake.srv.URL, "")
	res, err := b.runner.Run(context.Background(), backfill.Request{Source: b.cfg.Sources["stripe"], Since: now.Add(-time.Hour), Actor: "ivy"})
	require.NoError(t, err)
	require.Equal(t, [4]int{4, 2, 2, 2}, [4]int{res.Listed, res.Found, res.Stored, res.Refused})
	require.Equal(t, []string{eventID(t, events[1]), eventID(t, events[2])}, res.RefusedIDs)
	got := b.envelopes(t, "stripe")
	require.Len(t, got, 2)
	require.NotContains(t, got, eventID(t, events[1]))
	require.NotContains(t, got, eventID(t, events[2]))
	require.Len(t, res.Warnings, 2)
	require.Contains(t, res.Warnings[0], "api_url is "+fake.srv.URL)
	require.Contains(t, res.Warnings[1], "livemode")
	require.Contains(t, b.logs.String(), "livemode")
}

// A resume must be of the run as it was: a dry run resumed as a real one
// (or the reverse), or with another list of Stripe accounts, is refused;
// a run another process is writing (heartbeat fresh) is refused, one whose
// heartbeat is stale is claimed, recording who resumed it.
func TestStripeResumeRefusesAMismatchAndASecondWriter(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	now := time.Now()
	events := stripeEvents(150, "rm", now.Add(-time.Minute))
	fake := newFakeStripe(t, events)
	var mu sync.Mutex
	broken := true
	fake.FaultFunc = func(n int, q url.Values, w http.ResponseWriter) bool {
		mu.Lock()
		defer mu.Unlock()
		if broken && q.Get("starting_after") != "" {
			stripeError(w, http.StatusServiceUnavailable, "api_error", "The server is temporarily unavailable.")
			return true
		}
		return false
	}
	b := setup(t, fake.srv.URL, "")
	src := b.cfg.Sources["stripe"]
	res, err := b.runner.Run(ctx, backfill.Request{Source: src, Since: now.Add(-24 * time.Hour), Actor: "dora"})
	require.Error(t, err)
	require.Equal(t, 100, res.Stored)
	mu.Lock()
	broken = false
	mu.Unlock()

	_, err = b.runner.Run(ctx, backfill.Request{Source: src, Resume: res.RunID, DryRun: true, Actor: "dora"})
	require.ErrorIs(t, err, backfill.ErrCannotResume)
	require.ErrorContains(t, err, "resumed as a dry run")

	other := *src
	bf := *src.Backfill
	bf.Accounts = []string{"acct_1Other"}
	other.Backfill = &bf
	_, err = b.runner.Run(ctx, backfill.Request{Source: &other, Resume: res.RunID, Actor: "dora"})
	require.ErrorIs(t, err, backfill.ErrCannotResume)
	require.ErrorContains(t, err, "Stripe accounts")

	// Another process writes it: running, heartbeat fresh.
	_, err = b.pool.Exec(ctx, `UPDATE backfill_run SET status = 'running', heartbeat_at = now() WHERE id = $1`, res.RunID)
	require.NoError(t, err)
	_, err = b.runner.Run(ctx, backfill.Request{Source: src, Resume: res.RunID, Actor: "erin"})
	require.ErrorContains(t, err, "is running (last heartbeat")
	require.Len(t, b.envelopes(t, "stripe"), 100, "nothing stored by the refused resumes")

	// Its writer died: the heartbeat is stale, the row is claimed.
	_, err = b.pool.Exec(ctx, `UPDATE backfill_run SET heartbeat_at = now() - interval '1 hour' WHERE id = $1`, res.RunID)
	require.NoError(t, err)
	res2, err := b.runner.Run(ctx, backfill.Request{Source: src, Resume: res.RunID, Actor: "erin"})
	require.NoError(t, err)
	require.Equal(t, [2]int{150, 150}, [2]int{res2.Found, res2.Stored})
	require.Equal(t, [2]int{100, 100}, [2]int{res2.PriorFound, res2.PriorStored})
	var resumedBy string
	var accounts []string
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT resumed_by, accounts FROM backfill_run WHERE id = $1`, res.RunID).Scan(&resumedBy, &accounts))
	require.Equal(t, "erin", resumedBy)
	require.Equal(t, []string{""}, accounts)
	require.Len(t, b.envelopes(t, "stripe"), 150)
}

// A writer whose run was claimed by another process stops at its next
// write and leaves the row to the new writer.
func TestStripeRunClaimedFromUnderItStops(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	now := time.Now()
	fake := newFakeStripe(t, stripeEvents(250, "cl", now.Add(-time.Minute)))
	b := setup(t, fake.srv.URL, "")
	var claimed bool
	res, err := b.runner.Run(ctx, backfill.Request{Source: b.cfg.Sources["stripe"], Since: now.Add(-24 * time.Hour), Actor: "fay",
		ProgressFunc: func(p backfill.Progress) {
			if !claimed {
				claimed = true
				_, err := b.pool.Exec(ctx, `UPDATE backfill_run SET writer = 'another', status = 'running'`)
				require.NoError(t, err)
			}
		}})
	require.ErrorIs(t, err, backfill.ErrClaimed)
	require.Equal(t, 200, res.Stored, "the page in hand is stored (a duplicate for the new writer), then the run stops")
	row := b.run(t, res.RunID)
	require.Equal(t, [2]any{"running", 100}, [2]any{row.Status, row.Stored}, "the row is the new writer's")
}

// What a run stored is found by a partial index on envelope.backfill_run_id
// (00175), valid, covering only backfilled envelopes.
func TestEnvelopeBackfillRunIDIndex(t *testing.T) {
	t.Parallel()
	b := setup(t, "", "")
	var def string
	var valid bool
	require.NoError(t, b.pool.QueryRow(context.Background(), `
		SELECT pg_get_indexdef(i.indexrelid), i.indisvalid FROM pg_index i
		 WHERE i.indexrelid = 'envelope_backfill_run_id_idx'::regclass`).Scan(&def, &valid))
	require.True(t, valid)
	require.Contains(t, def, "(backfill_run_id) WHERE (backfill_run_id IS NOT NULL)")
}

// Found is split: events younger than Stripe's retry window (72 h) may still
// be retried (missing_retrying), older ones were given up on
// (never_delivered). GitHub never retries, and its default window is 24 h.
func TestStripeBackfillSplitsRetryingFromNeverDelivered(t *testing.T) {
	t.Parallel()
	now := time.Now().Truncate(time.Second)
	events := append(stripeEvents(2, "young", now.Add(-time.Minute)), stripeEvents(1, "old", now.Add(-75*time.Hour))...)
	fake := newFakeStripe(t, events)
	b := setup(t, fake.srv.URL, "")
	res, err := b.runner.Run(context.Background(), backfill.Request{Source: b.cfg.Sources["stripe"], Since: now.Add(-80 * time.Hour), Actor: "gus"})
	require.NoError(t, err)
	require.Equal(t, [3]int{3, 2, 1}, [3]int{res.Found, res.Retrying, res.NeverDelivered})
	require.Equal(t, []bool{true, true, false}, []bool{res.Missing[0].Retrying, res.Missing[1].Retrying, res.Missing[2].Retrying})

	require.Equal(t, 24*time.Hour, backfill.Window(&config.Source{Provider: provider.GitHub, Backfill: &backfillspec.Spec{}}))
	require.Equal(t, 80*time.Hour, backfill.Window(&config.Source{Provider: provider.Stripe, Backfill: &backfillspec.Spec{}}))
}
