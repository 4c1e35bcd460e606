package admin

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/inboxhq/inbox/internal/envelope"
	"github.com/inboxhq/inbox/internal/pgtest"
	"github.com/inboxhq/inbox/internal/webhooktest"
)

// Three failures with one cause but ids in their messages are one row of
// Stats, not three.
func TestStatsGroupsFailuresByCause(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	var ids []int64
	for _, p := range []string{"pay_1", "pay_2", "pay_3"} {
		ids = append(ids, b.insert(t, "standard", "d-"+p, "payment.succeeded", webhooktest.StandardPayment(p, "m_1", 100, "XYZ")))
	}
	b.runWorker(t)
	waitStatus(t, b, ids, envelope.StatusFailed)
	require.Equal(t, 3, pgtest.Count(t, b.pool, `SELECT count(DISTINCT last_error) FROM envelope WHERE id = ANY($1)`, ids), "the messages differ")

	st, err := GetStats(ctx, b.pool)
	require.NoError(t, err)
	require.Len(t, st.Failures, 1)
	f := st.Failures[0]
	require.Equal(t, "unknown_currency", f.Cause)
	require.EqualValues(t, 3, f.Count)
	require.Equal(t, ids[2], f.LatestID)
	require.Contains(t, f.LatestError, `unknown currency "XYZ"`)
}

// waitStatus waits until every envelope of ids has status.
func waitStatus(t *testing.T, b *bundle, ids []int64, status envelope.Status) {
	t.Helper()
	pgtest.Eventually(t, 20*time.Second, fmt.Sprintf("envelopes %v to be %s", ids, status), func() (bool, string) {
		n := pgtest.Count(t, b.pool, `SELECT count(*) FROM envelope WHERE id = ANY($1) AND status = $2`, ids, status)
		return n == len(ids), fmt.Sprintf("%d of %d are", n, len(ids))
	})
}

// searchSetup stores three envelopes to search: two Standard payments of
// merchants m_1 and m_2, and a GitHub push, with headers as ingest keeps
// them (canonical names).
func searchSetup(t *testing.T) (*bundle, []int64) {
	t.Helper()
	b := setup(t)
	var ids []int64
	for _, d := range []struct {
		prov, id, event string
		body            []byte
		headers         map[string]string
	}{
		{"standard", "s-1", "payment.succeeded", webhooktest.StandardPayment("pay_1", "m_1", 100, "USD"), map[string]string{"Webhook-Id": "s-1"}},
		{"standard", "s-2", "payment.succeeded", webhooktest.StandardPayment("pay_2", "m_2", 250, "USD"), map[string]string{"Webhook-Id": "s-2"}},
		{"github", "g-1", "push", webhooktest.GitHubPush("refs/heads/main"), map[string]string{"X-Github-Event": "push", "X-Github-Delivery": "g-1"}},
	} {
		res, err := b.store.Insert(context.Background(), envelope.NewDelivery{
			Source: "src", Provider: d.prov, DeliveryID: d.id, EventType: d.event,
			Body: d.body, Payload: d.body, Headers: d.headers,
		})
		require.NoError(t, err)
		ids = append(ids, res.EnvelopeID)
	}
	return b, ids
}

func listIDs(t *testing.T, b *bundle, f Filter) []int64 {
	t.Helper()
	page, err := List(context.Background(), b.pool, ListRequest{Filter: f})
	require.NoError(t, err)
	out := []int64{}
	for _, e := range page.Envelopes {
		out = append(out, e.ID)
	}
	return out
}

func TestSearchListFiltersOnBodyAndHeaders(t *testing.T) {
	t.Parallel()
	b, ids := searchSetup(t)
	field := func(s string) json.RawMessage {
		c, err := ParseField(s)
		require.NoError(t, err)
		return c
	}
	cases := []struct {
		name string
		f    Filter
		want []int64 // newest first
	}{
		{"contains", Filter{Contains: []json.RawMessage{json.RawMessage(`{"data":{"merchant_id":"m_1"}}`)}}, []int64{ids[0]}},
		{"field", Filter{Contains: []json.RawMessage{field("data.merchant_id=m_2")}}, []int64{ids[1]}},
		{"json field", Filter{Contains: []json.RawMessage{field("data.amount_minor:=250")}}, []int64{ids[1]}},
		{"a string is not a number", Filter{Contains: []json.RawMessage{field("data.amount_minor=250")}}, []int64{}},
		{"two fields AND", Filter{Contains: []json.RawMessage{field("data.merchant_id=m_1"), field("data.currency=USD")}}, []int64{ids[0]}},
		{"shared value", Filter{Contains: []json.RawMessage{field("data.currency=USD")}}, []int64{ids[1], ids[0]}},
		{"header any case", Filter{Headers: map[string]string{"X-GitHub-Event": "push"}}, []int64{ids[2]}},
		{"header lower case", Filter{Headers: map[string]string{"webhook-id": "s-2"}}, []int64{ids[1]}},
		{"header value exact", Filter{Headers: map[string]string{"X-GitHub-Event": "pus"}}, []int64{}},
		{"with another field", Filter{EventType: "push", Contains: []json.RawMessage{field("data.currency=USD")}}, []int64{}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			require.Equal(t, c.want, listIDs(t, b, c.f))
		})
	}
}

func TestSearchFilterValidation(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		f    Filter
		want string
	}{
		{"not JSON", Filter{Contains: []json.RawMessage{json.RawMessage(`{"data":`)}}, "not JSON"},
		{"not an object", Filter{Contains: []json.RawMessage{json.RawMessage(`["m_1"]`)}}, "want a JSON object"},
		{"bad header name", Filter{Headers: map[string]string{"X Event": "push"}}, "header name"},
		{"bad cause", Filter{Cause: "Unknown Currency"}, "cause"},
		{"ids and search", Filter{IDs: []int64{1}, Cause: "timeout"}, "either by id"},
	} {
		require.ErrorContains(t, c.f.Validate(), c.want, c.name)
	}
	for _, s := range []string{"", "=x", "data..id=x", "data.amount:=10 x", "data.amount:={"} {
		_, err := ParseField(s)
		require.Error(t, err, s)
	}
	c, err := ParseField("data.object.metadata.order=a=b")
	require.NoError(t, err)
	require.JSONEq(t, `{"data":{"object":{"metadata":{"order":"a=b"}}}}`, string(c))
}

// Replay by cause: the dry run previews exactly the envelopes with that
// cause, and the replay records the cause in its filter.
func TestSearchReplayByCauseDryRun(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	bad := []int64{
		b.insert(t, "standard", "x-1", "payment.succeeded", webhooktest.StandardPayment("pay_1", "m_1", 100, "XYZ")),
		b.insert(t, "standard", "x-2", "payment.succeeded", webhooktest.StandardPayment("pay_2", "m_2", 100, "XYZ")),
	}
	other := b.insert(t, "standard", "x-3", "payment.succeeded", []byte(`{"type":"payment.succeeded","data":{}}`))
	b.runWorker(t)
	waitStatus(t, b, append([]int64{other}, bad...), envelope.StatusFailed)
	require.Equal(t, 1, pgtest.Count(t, b.pool, `SELECT count(*) FROM envelope WHERE id = $1 AND last_cause = 'invalid_payload'`, other))

	// River records the cancelled jobs after the worker's commit.
	pgtest.Eventually(t, 20*time.Second, "no live jobs", func() (bool, string) {
		n := pgtest.Count(t, b.pool, `SELECT count(*) FROM river_job WHERE state = ANY($1::river_job_state[])`, envelope.LiveJobStates())
		return n == 0, fmt.Sprintf("%d live jobs", n)
	})
	f := Filter{Status: envelope.StatusFailed, Cause: "unknown_currency"}
	dry, err := DryRun(ctx, b.pool, f, 0)
	require.NoError(t, err)
	require.Equal(t, 2, dry.Matched)
	require.Equal(t, 2, dry.WouldReplay)
	var sample []int64
	for _, s := range dry.Sample {
		sample = append(sample, s.ID)
		require.Equal(t, "unknown_currency", *s.LastCause)
	}
	require.ElementsMatch(t, bad, sample)
	require.Equal(t, 0, pgtest.Count(t, b.pool, `SELECT count(*) FROM envelope_replay`), "a dry run changes nothing")

	res, err := Replay(ctx, b.pool, b.jobs, ReplayRequest{Filter: f, Actor: "alice", Reason: "currency table fixed"})
	require.NoError(t, err)
	require.Equal(t, 2, res.Replayed)
	require.Equal(t, 2, pgtest.Count(t, b.pool, `SELECT count(*) FROM envelope_replay WHERE filter->>'cause' = 'unknown_currency' AND envelope_id = ANY($1)`, bad))
	require.Equal(t, "failed", b.status(t, other), "another cause is not replayed")
}

// A body search of failed envelopes is served by the partial GIN index of
// migration 00172 (the plan docs/audit.md shows), with the filter's own SQL.
func TestSearchContainsUsesFailedPayloadIndex(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	seedFailed(t, b.pool, "gh", 5000)
	_, err := b.pool.Exec(ctx, `ANALYZE envelope`)
	require.NoError(t, err)
	c, err := ParseField("ref=refs/heads/b77")
	require.NoError(t, err)
	f := Filter{Status: envelope.StatusFailed, Contains: []json.RawMessage{c}}
	where, args := f.Where(envelope.Clock{Now: time.Now()})
	rows, err := b.pool.Query(ctx, `EXPLAIN SELECT id FROM envelope WHERE `+where+` ORDER BY id DESC LIMIT 51`, envelope.CustomPlan(args)...)
	require.NoError(t, err)
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	plan := strings.Join(lines, "\n")
	t.Log(plan)
	// Each partition's copy of envelope_failed_payload_idx (named after the
	// partition): today's, where the seed is.
	require.Regexp(t, `Bitmap Index Scan on envelope_\d{8}_payload_idx`, plan)
	require.Equal(t, 1, len(listIDs(t, b, f)))
}
