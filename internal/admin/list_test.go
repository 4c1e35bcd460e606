package admin

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/inboxhq/inbox/internal/envelope"
	"github.com/inboxhq/inbox/internal/envelope/envelopetest"
	"github.com/inboxhq/inbox/internal/pgtest"
)

func ids(s []Summary) []int64 {
	out := []int64{}
	for _, e := range s {
		out = append(out, e.ID)
	}
	return out
}

func TestListPagesNewestFirst(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	seeded := seedFailed(t, b.pool, "gh", 7)
	other := seedFailed(t, b.pool, "other", 2)

	page, err := List(ctx, b.pool, ListRequest{Filter: Filter{Source: "gh"}, Limit: 3})
	require.NoError(t, err)
	require.Equal(t, []int64{seeded[6], seeded[5], seeded[4]}, ids(page.Envelopes))
	require.NotNil(t, page.NextBeforeID)
	require.Equal(t, seeded[4], *page.NextBeforeID)
	require.Equal(t, "gh", page.Envelopes[0].Source)
	require.Equal(t, envelope.StatusFailed, page.Envelopes[0].Status)

	page, err = List(ctx, b.pool, ListRequest{Filter: Filter{Source: "gh"}, Limit: 3, BeforeID: *page.NextBeforeID})
	require.NoError(t, err)
	require.Equal(t, []int64{seeded[3], seeded[2], seeded[1]}, ids(page.Envelopes))

	page, err = List(ctx, b.pool, ListRequest{Filter: Filter{Source: "gh"}, Limit: 3, BeforeID: *page.NextBeforeID})
	require.NoError(t, err)
	require.Equal(t, []int64{seeded[0]}, ids(page.Envelopes))
	require.Nil(t, page.NextBeforeID, "last page")

	// Exactly a page left: no cursor.
	page, err = List(ctx, b.pool, ListRequest{Filter: Filter{Source: "other"}, Limit: 2})
	require.NoError(t, err)
	require.Equal(t, []int64{other[1], other[0]}, ids(page.Envelopes))
	require.Nil(t, page.NextBeforeID)

	page, err = List(ctx, b.pool, ListRequest{})
	require.NoError(t, err)
	require.Len(t, page.Envelopes, 9)

	page, err = List(ctx, b.pool, ListRequest{Filter: Filter{Source: "nobody"}})
	require.NoError(t, err)
	require.NotNil(t, page.Envelopes, "an empty page is [] in JSON")

	_, err = List(ctx, b.pool, ListRequest{Limit: MaxListLimit + 1})
	require.ErrorContains(t, err, "limit")
	_, err = List(ctx, b.pool, ListRequest{Filter: Filter{Status: "bad"}})
	require.ErrorContains(t, err, "status")
}

func TestShowEverything(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	b.runWorker(t)
	body := standardPayment("pay_show")
	id := b.insert(t, "standard", "msg_show", "payment.succeeded", body)
	// A duplicate and a conflicting delivery of the same id.
	_, err := b.store.Insert(ctx, envelope.NewDelivery{Source: "src", Provider: "standard", DeliveryID: "msg_show", EventType: "payment.succeeded", Body: body, Payload: body, Headers: map[string]string{}})
	require.NoError(t, err)
	_, err = b.store.Insert(ctx, envelope.NewDelivery{Source: "src", Provider: "standard", DeliveryID: "msg_show", EventType: "payment.succeeded", Body: []byte(`{"other":1}`), Headers: map[string]string{"webhook-signature": "[redacted]"}})
	var conflict *envelope.ConflictError
	require.True(t, errors.As(err, &conflict))
	b.waitStatusIs(t, 20*time.Second, "processing", id, "done")
	_, err = Replay(ctx, b.pool, b.jobs, ReplayRequest{Filter: Filter{IDs: []int64{id}}, Actor: "alice", Reason: "check"})
	require.NoError(t, err)
	b.waitStatusIs(t, 20*time.Second, "reprocessing", id, "done")

	d, err := Show(ctx, b.pool, id, ShowOptions{})
	require.NoError(t, err)
	e := d.Envelope
	require.Equal(t, id, e.ID)
	require.Equal(t, "src", e.Source)
	require.Equal(t, "msg_show", e.DeliveryID)
	require.Equal(t, envelope.StatusDone, e.Status)
	require.Equal(t, 1, e.Duplicates)
	require.NotNil(t, e.LastDuplicateAt)
	require.Equal(t, map[string]string{"webhook-signature": "[redacted]"}, e.Headers)
	require.Equal(t, BodyText, e.BodyEncoding)
	require.Equal(t, string(body), *e.Body)
	require.Len(t, e.BodySHA256, 64)
	require.Equal(t, len(body), e.BodySize)
	require.Contains(t, string(e.Result), `"posted"`)

	require.Len(t, d.Attempts, 2)
	require.Equal(t, "done", d.Attempts[0].Outcome)
	require.NotNil(t, d.Attempts[1].JobID)
	require.Len(t, d.Replays, 1)
	require.Equal(t, "alice", d.Replays[0].Actor)
	require.Equal(t, "check", d.Replays[0].Reason)
	require.Equal(t, "done", d.Replays[0].PriorStatus)
	require.JSONEq(t, `{"ids":[`+jsonInt(id)+`]}`, string(d.Replays[0].Filter))
	require.Len(t, d.Conflicts, 1)
	require.Equal(t, conflict.ConflictID, d.Conflicts[0].ID)
	require.Equal(t, len(`{"other":1}`), d.Conflicts[0].BodySize)
	require.Empty(t, d.Jobs, "a done envelope's jobs are deleted by the attempts that finished it; the attempts keep their ids")
	require.NotEqual(t, *d.Attempts[0].JobID, *d.Attempts[1].JobID, "the replay ran as a job of its own")

	require.NotNil(t, d.Ledger)
	require.Equal(t, "payment", d.Ledger.Kind)
	require.Equal(t, int64(1234), d.Ledger.AmountMinor)
	require.Equal(t, "USD", d.Ledger.Currency)
	require.Len(t, d.Ledger.Entries, 2)
	require.Equal(t, int64(0), d.Ledger.Entries[0].AmountMinor+d.Ledger.Entries[1].AmountMinor, "balanced")
	require.Equal(t, "psp_clearing", d.Ledger.Entries[0].Account)
	require.Equal(t, "m_1", d.Ledger.Entries[0].Merchant)

	d, err = Show(ctx, b.pool, id, ShowOptions{NoBody: true})
	require.NoError(t, err)
	require.Nil(t, d.Envelope.Body)
	require.Empty(t, d.Envelope.BodyEncoding)

	_, err = Show(ctx, b.pool, 987654, ShowOptions{})
	require.ErrorIs(t, err, envelope.ErrNotFound)
	require.EqualError(t, err, "envelope 987654 not found")
}

func TestShowBinaryBodyAndEmptySections(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	raw := []byte{0xff, 0xfe, 0x00, 'x'}
	id := envelopetest.Insert(t, b.pool, envelopetest.Row{Source: "s", Provider: "shopify", DeliveryID: "bin", EventType: "orders/paid", Body: raw})
	d, err := Show(ctx, b.pool, id, ShowOptions{})
	require.NoError(t, err)
	require.Equal(t, BodyBase64, d.Envelope.BodyEncoding)
	require.Equal(t, base64.StdEncoding.EncodeToString(raw), *d.Envelope.Body)
	require.Nil(t, d.Ledger)
	out, err := json.Marshal(d)
	require.NoError(t, err)
	for _, k := range []string{`"attempts":[]`, `"replays":[]`, `"conflicts":[]`, `"jobs":[]`, `"ledger_transaction":null`, `"result":null`} {
		require.Contains(t, string(out), k)
	}
}

func TestStats(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	empty, err := GetStats(ctx, b.pool)
	require.NoError(t, err)
	require.Empty(t, empty.Sources)
	require.Nil(t, empty.OldestPending)
	require.Empty(t, empty.Failures)

	failed := seedFailed(t, b.pool, "gh", 7)
	_, err = b.pool.Exec(ctx, `UPDATE envelope SET last_error = 'permanent: bad payload', last_cause = 'invalid_payload' WHERE id = ANY($1)`, failed[3:5])
	require.NoError(t, err)
	_, err = b.pool.Exec(ctx, `UPDATE envelope SET status = 'ignored' WHERE id = $1`, failed[6])
	require.NoError(t, err)
	b.insert(t, "standard", "m1", "payment.succeeded", standardPayment("p1"))
	b.insert(t, "standard", "m2", "payment.succeeded", standardPayment("p2"))
	for range 3 { // duplicates
		_, err := b.store.Insert(ctx, envelope.NewDelivery{Source: "src", Provider: "standard", DeliveryID: "m1", EventType: "payment.succeeded", Body: standardPayment("p1"), Headers: map[string]string{}})
		require.NoError(t, err)
	}
	_, err = b.store.Insert(ctx, envelope.NewDelivery{Source: "src", Provider: "standard", DeliveryID: "m2", EventType: "payment.succeeded", Body: []byte(`{}`), Headers: map[string]string{}})
	require.Error(t, err) // a conflict
	_, err = Replay(ctx, b.pool, b.jobs, req(Filter{IDs: failed[:3]}))
	require.NoError(t, err)
	_, err = b.pool.Exec(ctx, `UPDATE envelope_replay SET replayed_at = now() - interval '25 hours' WHERE envelope_id = $1`, failed[2])
	require.NoError(t, err)

	st, err := GetStats(ctx, b.pool)
	require.NoError(t, err)
	require.Equal(t, []SourceStats{
		{Source: "gh", Pending: 3, Failed: 3, Ignored: 1, Total: 7, ReceivedLastHour: 7, ReceivedLast24h: 7},
		{Source: "src", Pending: 2, Total: 2, Duplicates: 3, Conflicts: 1, ReceivedLastHour: 2, ReceivedLast24h: 2},
	}, st.Sources)
	require.Equal(t, SourceStats{Source: "total", Pending: 5, Failed: 3, Ignored: 1, Total: 9, Duplicates: 3, Conflicts: 1,
		ReceivedLastHour: 9, ReceivedLast24h: 9}, st.Totals)

	require.NotNil(t, st.OldestPending)
	require.Equal(t, failed[0], st.OldestPending.EnvelopeID, "seeded envelopes are older than inserted ones")
	require.Greater(t, st.OldestPending.AgeSeconds, 3.0)
	require.Equal(t, []FailureCause{
		{Cause: "invalid_payload", Count: 2, LatestID: failed[4], LatestError: "permanent: bad payload"},
		{Cause: "", Count: 1, LatestID: failed[5], LatestError: "attempts exhausted (1 of 1): seeded"}, // failed before causes were recorded
	}, st.Failures)
	require.Equal(t, ReplayStats{Replays: 2, Envelopes: 2, Runs: 1}, st.Replays)

	// Arrivals outlive their envelopes: a source whose envelopes are all
	// gone within the day is still listed with what it received.
	_, err = b.pool.Exec(ctx, `DELETE FROM envelope WHERE source = 'gh'`)
	require.NoError(t, err)
	st, err = GetStats(ctx, b.pool)
	require.NoError(t, err)
	require.Len(t, st.Sources, 2)
	require.Equal(t, SourceStats{Source: "gh", ReceivedLastHour: 7, ReceivedLast24h: 7}, st.Sources[0], "listed for its arrivals alone, in order")
}

func jsonInt(n int64) string {
	b, _ := json.Marshal(n)
	return string(b)
}

// A delivery stored whatever its body (no event type, not JSON) is ignored
// by the worker, and the listing says why it was not routed.
func TestListShowsWhyStoredEnvelopesWereNotRouted(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	b.runWorker(t)
	res, err := b.store.Insert(ctx, envelope.NewDelivery{Source: "src", Provider: "standard", DeliveryID: "msg_text",
		Body: []byte("not json"), Headers: map[string]string{}})
	require.NoError(t, err)
	noType := res.EnvelopeID
	unknown := b.insert(t, "standard", "msg_unknown", "invoice.created", []byte(`{"type":"invoice.created"}`))
	pgtest.Eventually(t, 10*time.Second, "both ignored", func() (bool, string) {
		a, c := b.status(t, noType), b.status(t, unknown)
		return a == "ignored" && c == "ignored", fmt.Sprintf("envelope %d is %s, envelope %d is %s", noType, a, unknown, c)
	})

	page, err := List(ctx, b.pool, ListRequest{Filter: Filter{Status: envelope.StatusIgnored}})
	require.NoError(t, err)
	require.Equal(t, []int64{unknown, noType}, ids(page.Envelopes))
	require.NotNil(t, page.Envelopes[0].Reason)
	require.Equal(t, "no handler for standard event invoice.created", *page.Envelopes[0].Reason)
	require.NotNil(t, page.Envelopes[1].Reason)
	require.Contains(t, *page.Envelopes[1].Reason, "no handler")
	require.Equal(t, "", page.Envelopes[1].EventType)

	d, err := Show(ctx, b.pool, noType, ShowOptions{})
	require.NoError(t, err)
	require.NotNil(t, d.Envelope.Reason)

	// Not ignored: no reason.
	failed := seedFailed(t, b.pool, "gh", 1)
	page, err = List(ctx, b.pool, ListRequest{Filter: Filter{Source: "gh"}})
	require.NoError(t, err)
	require.Equal(t, failed, ids(page.Envelopes))
	require.Nil(t, page.Envelopes[0].Reason)
}
