package admin

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/inboxhq/inbox/internal/envelope"
	"github.com/inboxhq/inbox/internal/envelope/envelopetest"
	"github.com/inboxhq/inbox/internal/pgtest"
)

// seedDays stores perDay envelopes a day for days days back from now, in
// the day partitions envelopetest creates, of two sources, every status,
// two causes and a body and header each; the envelope received 30 minutes
// ago has the body field "email":"rare@example.com".
func seedDays(t *testing.T, b *bundle, now time.Time, days, perDay int) {
	t.Helper()
	statuses := []string{"done", "done", "done", "failed", "ignored"}
	envelopetest.InsertMany(t, b.pool, days*perDay, func(i int) envelopetest.Row {
		age := time.Duration(i) * 24 * time.Hour / time.Duration(perDay)
		email := fmt.Sprintf("user%d@example.com", i)
		if i == perDay/48 { // 30 minutes ago
			email = "rare@example.com"
		}
		r := envelopetest.Row{Source: []string{"alpha", "beta"}[i%2], Provider: "standard", DeliveryID: fmt.Sprintf("w-%d", i),
			EventType: []string{"payment.succeeded", "refund.succeeded"}[i%3%2], Status: statuses[i%len(statuses)],
			Body:       fmt.Appendf(nil, `{"type":"payment.succeeded","data":{"customer":{"email":%q},"n":%d}}`, email, i),
			Headers:    map[string]string{"Webhook-Id": fmt.Sprintf("w-%d", i), "X-Tenant": []string{"t1", "t2"}[i%2]},
			ReceivedAt: now.Add(-age - time.Second), ProcessedAt: now, Attempts: 1}
		if r.Status == "failed" {
			r.LastError, r.LastCause = "permanent: seeded", []string{"unknown_currency", "invalid_payload"}[i%2]
		}
		return r
	})
	_, err := b.pool.Exec(context.Background(), `ANALYZE envelope, envelope_key`)
	require.NoError(t, err)
}

var partitionName = regexp.MustCompile(`envelope_(\d{8})\b`)

// siblingPartitionName also names the partitions of the tables on
// envelope's bounds that a list reads (a summary's duplicates and
// conflicts, a body search's bodies).
var siblingPartitionName = regexp.MustCompile(`envelope_(?:duplicate_|conflict_|body_)?(\d{8})\b`)

// explain returns the plan of the statement List runs for sel, with
// sequential scans disabled when noSeqScan (a seeded test table is small
// enough for one to be cheapest, where the same table at size is not).
func explain(t *testing.T, b *bundle, sel envelope.Selection, noSeqScan bool) string {
	t.Helper()
	sql, args := envelope.SummariesSQL(sel, 51, false)
	if noSeqScan {
		return explainSQL(t, b, sql, args, "enable_seqscan = off")
	}
	return explainSQL(t, b, sql, args)
}

// explainSQL returns the plan of sql with args (run as CustomPlan runs
// them), under the planner settings given (SET LOCAL).
func explainSQL(t *testing.T, b *bundle, sql string, args []any, settings ...string) string {
	t.Helper()
	ctx := context.Background()
	tx, err := b.pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	for _, set := range settings {
		_, err = tx.Exec(ctx, `SET LOCAL `+set)
		require.NoError(t, err)
	}
	rows, err := tx.Query(ctx, `EXPLAIN `+sql, envelope.CustomPlan(args)...)
	require.NoError(t, err)
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return strings.Join(lines, "\n")
}

// Every filter of admin.Filter, in the window List reads by default, is
// planned over that window's partitions only (today's and yesterday's of
// five): no plan walks the other days' rows, however the planner chooses
// to read the window's. A delivery id is found through envelope_key's index
// whatever the window, each partition probed by its primary key.
func TestListPlansPruneToTheWindow(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	pgtest.AwayFromMidnight(t, b.pool, 2*time.Minute) // the seed and List read the clock each
	clock, err := envelope.ReadClock(ctx, b.pool)
	require.NoError(t, err)
	seedDays(t, b, clock.Now, 5, 400)
	day := func(ago time.Duration) string { return clock.Now.Add(-ago).UTC().Format("20060102") }
	field, err := ParseField("data.customer.email=rare@example.com")
	require.NoError(t, err)
	for _, tc := range []struct {
		name string
		f    Filter
		// ago is how long before now the window ends (Until), which
		// decides its days: "until 2 h ago" read shortly after midnight
		// UTC is yesterday's and the day before's.
		ago time.Duration
	}{
		{"no filter", Filter{}, 0},
		{"source", Filter{Source: "alpha"}, 0},
		{"status", Filter{Status: envelope.StatusFailed}, 0},
		{"source and status", Filter{Source: "beta", Status: envelope.StatusDone}, 0},
		{"cause", Filter{Cause: "unknown_currency"}, 0},
		{"event type", Filter{Source: "alpha", EventType: "refund.succeeded"}, 0},
		{"body field", Filter{Contains: []json.RawMessage{field}}, 0},
		{"body field of failed", Filter{Status: envelope.StatusFailed, Contains: []json.RawMessage{field}}, 0},
		{"header", Filter{Headers: map[string]string{"x-tenant": "t2"}}, 0},
		{"until", Filter{Source: "alpha", Until: Bound{Ago: 2 * time.Hour}}, 2 * time.Hour},
	} {
		window := []string{day(tc.ago), day(tc.ago + DefaultWindow)}
		sel, scan := listSelection(tc.f, clock)
		require.True(t, scan.DefaultWindow, tc.name)
		plan := explain(t, b, sel, false)
		var read []string
		for _, m := range siblingPartitionName.FindAllStringSubmatch(plan, -1) {
			read = append(read, m[1])
		}
		require.NotEmpty(t, read, "%s: no partition in the plan:\n%s", tc.name, plan)
		for _, p := range read {
			require.Contains(t, window, p, "%s reads a partition outside its window:\n%s", tc.name, plan)
		}
	}

	// Keyed: the delivery id's key, then the partition of its envelope
	// only, by its primary key: no scan of a partition's rows (2,000 keys
	// in 8 hash partitions are cheapest to scan; at size the planner uses
	// this index by itself), and no other day's partition planned.
	sel, _ := listSelection(Filter{DeliveryID: "w-1200"}, clock)
	tx, err := b.pool.Begin(ctx)
	require.NoError(t, err)
	keyed, ok, err := keyedSelection(ctx, tx, sel)
	require.NoError(t, err)
	require.True(t, ok)
	require.NoError(t, tx.Rollback(ctx))
	require.Len(t, keyed.IDs, 1)
	plan := explain(t, b, keyed, true)
	require.Regexp(t, `Index (Only )?Scan using envelope_key_\w+ on envelope_key_\w+`, plan)
	require.NotRegexp(t, `Seq Scan on envelope_\d`, plan)
	require.Regexp(t, `Index Scan (Backward )?using envelope_\d{8}_pkey on envelope_\d{8} `, plan)
	require.Equal(t, []string{day(72*time.Hour + time.Second)}, slices.Compact(partitionNames(plan)), plan)
	page, err := List(ctx, b.pool, ListRequest{Filter: Filter{DeliveryID: "w-1200"}})
	require.NoError(t, err)
	require.Len(t, page.Envelopes, 1, "three days old, and found: a delivery id has no default window")
	require.Equal(t, keyed.IDs[0], page.Envelopes[0].ID)
	require.True(t, page.Scan.Keyed)
	page, err = List(ctx, b.pool, ListRequest{Filter: Filter{DeliveryID: "w-none"}, CountUpTo: 100, ByStatus: true})
	require.NoError(t, err)
	require.Empty(t, page.Envelopes)
	require.Len(t, page.ByStatus, len(envelope.Statuses()), "every status's tab, counted 0")
	for _, c := range page.ByStatus {
		require.Zero(t, c.N, "%+v", c)
	}
	for _, f := range []Filter{
		{DeliveryID: "w-none"},
		{DeliveryID: "w-1200", Source: "beta"}, // w-1200 is alpha's
	} {
		page, err = List(ctx, b.pool, ListRequest{Filter: f})
		require.NoError(t, err)
		require.NotNil(t, page.Envelopes)
		require.Empty(t, page.Envelopes, "%+v", f)
	}

	// A chunk of a bounded search reads one partition: an hour of
	// yesterday (UTC), so that it never spans midnight.
	midnight := clock.Now.UTC().Truncate(24 * time.Hour)
	c := envelope.Selection{Headers: map[string]string{"x-tenant": "t2"}, AfterID: envelope.IDAt(midnight.Add(-2*time.Hour)) - 1, BeforeID: envelope.IDAt(midnight.Add(-time.Hour))}
	plan = explain(t, b, c, false)
	require.Equal(t, []string{midnight.Add(-2 * time.Hour).Format("20060102")}, slices.Compact(partitionNames(plan)), plan)
}

// requireLookupPlan checks the plan of an index lookup (BodyMatchesSQL,
// HeaderMatchesSQL) over chunks' ids, planned with sequential scans off (a
// seeded test table is small enough for one to be cheapest) and with
// cpu_operator_cost at 100x its default (PostgreSQL counts a jsonb
// containment as one operator; it walks the document, and reading today's
// few rows by the primary key and testing each would otherwise look
// cheaper, depending on the hour the test runs, where at size it is not):
// a bitmap scan of the index index names, no sequential scan, no
// partition outside chunks'; and that every chunk has that index (has).
func requireLookupPlan(t *testing.T, b *bundle, sql string, args []any, chunks []envelope.Chunk, index string, has func(envelope.Chunk) bool) {
	t.Helper()
	plan := explainSQL(t, b, sql, args, "enable_seqscan = off", "cpu_operator_cost = 0.25")
	require.Regexp(t, `Bitmap Index Scan on `+index, plan)
	require.NotContains(t, plan, "Seq Scan")
	var days []string
	for _, c := range chunks {
		require.True(t, has(c), "%+v", c)
		days = append(days, c.Partition)
	}
	for _, d := range partitionNames(plan) {
		require.Contains(t, days, d, "a partition outside the window:\n%s", plan)
	}
}

func partitionNames(plan string) []string {
	var out []string
	for _, m := range partitionName.FindAllStringSubmatch(plan, -1) {
		out = append(out, m[1])
	}
	return out
}

// List reads the last 24 hours unless asked, and says so.
func TestListDefaultWindow(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	pgtest.AwayFromMidnight(t, b.pool, 2*time.Minute) // the seed and List read the clock each
	clock, err := envelope.ReadClock(ctx, b.pool)
	require.NoError(t, err)
	seedDays(t, b, clock.Now, 3, 100)

	page, err := List(ctx, b.pool, ListRequest{Filter: Filter{Source: "alpha"}, Limit: 1000, CountUpTo: 1000})
	require.NoError(t, err)
	require.True(t, page.Scan.DefaultWindow)
	require.WithinDuration(t, clock.Now.Add(-DefaultWindow), page.Scan.Since, 5*time.Second)
	require.Equal(t, 50, page.Matched, "alpha's half of the last day's 100")
	require.Len(t, page.Envelopes, 50)
	for _, e := range page.Envelopes {
		require.True(t, e.ReceivedAt.After(page.Scan.Since), "%d received %s", e.ID, e.ReceivedAt)
	}
	require.GreaterOrEqual(t, page.Scan.Partitions, 1)
	require.LessOrEqual(t, page.Scan.Partitions, 2)
	require.Contains(t, page.Scan.String(), "the default: the last 24 hours")

	page, err = List(ctx, b.pool, ListRequest{Filter: Filter{Source: "alpha", Since: Bound{Ago: 72 * time.Hour}}, Limit: 1000, CountUpTo: 1000})
	require.NoError(t, err)
	require.False(t, page.Scan.DefaultWindow)
	require.Equal(t, 150, page.Matched)

	// Until alone: the 24 hours before it.
	page, err = List(ctx, b.pool, ListRequest{Filter: Filter{Source: "alpha", Until: Bound{Ago: 24 * time.Hour}}, Limit: 1000, CountUpTo: 1000})
	require.NoError(t, err)
	require.True(t, page.Scan.DefaultWindow)
	require.Equal(t, 50, page.Matched)
}

// A body or header search no index serves reads at most its budget of
// envelopes, newest first, then stops and says how far back it got; the
// next page's cursor goes on from there, and the rare match is found in
// the end. What it reads is estimated from the counters, not scanned.
func TestListBoundedSearchStopsAtItsBudget(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	pgtest.AwayFromMidnight(t, b.pool, 2*time.Minute) // the seed and List read the clock each
	clock, err := envelope.ReadClock(ctx, b.pool)
	require.NoError(t, err)
	seedDays(t, b, clock.Now, 1, 2400) // one a 36 s; rare@ is 30 minutes old
	rare, err := ParseField("data.customer.email=rare@example.com")
	require.NoError(t, err)

	const budget = 20 // ~12 minutes of the seed
	req := ListRequest{Filter: Filter{Contains: []json.RawMessage{rare}}, ScanBudget: budget}
	page, err := List(ctx, b.pool, req)
	require.NoError(t, err)
	require.Empty(t, page.Envelopes)
	s := page.Scan
	require.True(t, s.Stopped, "%+v", s)
	require.Equal(t, int64(budget), s.Budget)
	require.Positive(t, s.Searched)
	require.LessOrEqual(t, s.Searched, int64(budget))
	require.True(t, s.SearchedFrom.After(clock.Now.Add(-30*time.Minute)), "stopped before the match: %s", s.SearchedFrom)
	require.NotNil(t, page.NextBeforeID)
	require.Contains(t, s.String(), "stopped at the scan budget of 20 envelopes")

	var found []Summary
	pages := 1
	for page.NextBeforeID != nil && len(found) == 0 {
		req.BeforeID = *page.NextBeforeID
		page, err = List(ctx, b.pool, req)
		require.NoError(t, err)
		require.LessOrEqual(t, page.Scan.Searched, int64(budget))
		found = page.Envelopes
		pages++
		require.Less(t, pages, 200, "the search never got there")
	}
	require.Len(t, found, 1)
	require.GreaterOrEqual(t, pages, 2)
	var email string
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT payload #>> '{data,customer,email}' FROM envelope_with_body WHERE id = $1`, found[0].ID).Scan(&email))
	require.Equal(t, "rare@example.com", email)

	// A budget that covers the window reads it whole, in one page.
	page, err = List(ctx, b.pool, ListRequest{Filter: Filter{Contains: []json.RawMessage{rare}}})
	require.NoError(t, err)
	require.Len(t, page.Envelopes, 1)
	require.False(t, page.Scan.Stopped)
	require.Nil(t, page.NextBeforeID)
	require.InDelta(t, 2400, page.Scan.Searched, 120, "the counters' estimate of the window")
}

// PlanScan's chunks are newest first, contiguous in ids and in time, cover
// the window, and hold about chunkRows each.
func TestPlanScanChunks(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	pgtest.AwayFromMidnight(t, b.pool, 2*time.Minute) // the seed and List read the clock each
	clock, err := envelope.ReadClock(ctx, b.pool)
	require.NoError(t, err)
	seedDays(t, b, clock.Now, 2, 1000)
	since, until := clock.Now.Add(-30*time.Hour), clock.Now.Add(time.Second)
	chunks, err := envelope.PlanScan(ctx, b.pool, since, until, 100)
	require.NoError(t, err)
	require.NotEmpty(t, chunks)
	require.Equal(t, until, chunks[0].To)
	require.Equal(t, envelope.IDBefore(until), chunks[0].UpperID)
	require.Equal(t, since, chunks[len(chunks)-1].From)
	require.Equal(t, envelope.IDAt(since), chunks[len(chunks)-1].LowerID)
	var total int64
	for i, c := range chunks {
		require.True(t, c.From.Before(c.To), "%+v", c)
		require.LessOrEqual(t, c.Envelopes, int64(150), "%+v", c)
		if i > 0 {
			require.Equal(t, chunks[i-1].From, c.To, "contiguous in time")
			require.Equal(t, chunks[i-1].LowerID, c.UpperID, "contiguous in ids")
		}
		total += c.Envelopes
	}
	// 30 of the seed's 48 hours (plus the ceilings of each chunk's share).
	require.InDelta(t, 1250, total, 100)
	_, err = envelope.PlanScan(ctx, b.pool, since, until, 0)
	require.ErrorContains(t, err, "must be positive")
}

// A body search reads the partitions that have the body index (migration
// 00203) through it: the rare value is found with a budget far too small
// for the walk (TestListBoundedSearchStopsAtItsBudget), outside the
// budget, each candidate checked against the rest of the filter; the
// lookup's plan is a bitmap scan of the window's body partitions' indexes
// only. A value too common for the index is walked newest first, and so
// is a partition without it (bodies in rows), in the same search, whose
// cursor goes from one to the other.
func TestBodySearchReadsTheBodyIndex(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	pgtest.AwayFromMidnight(t, b.pool, 2*time.Minute) // the seed and List read the clock each
	clock, err := envelope.ReadClock(ctx, b.pool)
	require.NoError(t, err)
	seedDays(t, b, clock.Now, 3, 400) // one every 3.6 minutes; rare@ is 30 minutes old, source alpha
	require.EqualValues(t, 1200, envelopetest.MoveBodies(t, b.pool))
	_, err = b.pool.Exec(ctx, `ANALYZE envelope_body`)
	require.NoError(t, err)
	rare, err := ParseField("data.customer.email=rare@example.com")
	require.NoError(t, err)
	email := func(id int64) string {
		var e string
		require.NoError(t, b.pool.QueryRow(ctx, `SELECT payload #>> '{data,customer,email}' FROM envelope_with_body WHERE id = $1`, id).Scan(&e))
		return e
	}

	page, err := List(ctx, b.pool, ListRequest{Filter: Filter{Contains: []json.RawMessage{rare}}, ScanBudget: 16})
	require.NoError(t, err)
	require.Len(t, page.Envelopes, 1)
	require.Equal(t, "rare@example.com", email(page.Envelopes[0].ID))
	s := page.Scan
	require.False(t, s.Stopped, "%+v", s)
	require.Zero(t, s.Searched, "nothing walked")
	require.Positive(t, s.Indexed)
	require.Equal(t, s.Envelopes, s.Indexed, "the whole window (the counters' estimate), through the index")
	require.Nil(t, page.NextBeforeID)
	require.Contains(t, s.String(), "through an index")

	page, err = List(ctx, b.pool, ListRequest{Filter: Filter{Source: "beta", Contains: []json.RawMessage{rare}}, ScanBudget: 16})
	require.NoError(t, err)
	require.Empty(t, page.Envelopes, "a candidate of another source")
	require.False(t, page.Scan.Stopped)

	// The lookup's plan: the body indexes of today's and yesterday's
	// partitions (the default window), no other day's. Sequential scans
	// off: a seeded test table is small enough for one to be cheapest.
	sel, _ := listSelection(Filter{Contains: []json.RawMessage{rare}}, clock)
	chunks, err := envelope.PlanScan(ctx, b.pool, sel.Since, sel.Until, math.MaxInt64)
	require.NoError(t, err)
	sql, args := envelope.BodyMatchesSQL(sel.Contains, chunks[len(chunks)-1].LowerID, chunks[0].UpperID, 51)
	requireLookupPlan(t, b, sql, args, chunks, `envelope_body_\d{8}_payload_idx`, func(c envelope.Chunk) bool { return c.BodyIndexed })

	// Every envelope has this type: more matches in a partition than a
	// chunk's worth (budget/8 = 10), so the search walks, newest first.
	// The window is yesterday (UTC), a whole day's partition: today's, in
	// the first hour after midnight, holds too few envelopes to pass a
	// chunk's worth, and is rightly read through the index.
	common := json.RawMessage(`{"type":"payment.succeeded"}`)
	yesterday := Filter{Contains: []json.RawMessage{common}, Until: Bound{At: clock.Now.UTC().Truncate(24 * time.Hour)}}
	page, err = List(ctx, b.pool, ListRequest{Filter: yesterday, ScanBudget: 80, Limit: 5})
	require.NoError(t, err)
	window, _ := listSelection(yesterday, clock)
	window.Contains = nil
	newest, err := envelope.Summaries(ctx, b.pool, window, 5, false)
	require.NoError(t, err)
	require.Len(t, newest, 5)
	require.Equal(t, newest, page.Envelopes)
	require.Zero(t, page.Scan.Indexed)
	require.Positive(t, page.Scan.Searched)

	// A second rare body two days back, in a partition whose bodies are in
	// their rows (InsertMany stores them so): no index there.
	old := envelopetest.InsertMany(t, b.pool, 1, func(int) envelopetest.Row {
		return envelopetest.Row{Source: "alpha", Status: "done", ReceivedAt: clock.Now.Add(-47 * time.Hour),
			Body: []byte(`{"type":"payment.succeeded","data":{"customer":{"email":"rare@example.com"}}}`)}
	})[0]
	req := ListRequest{Filter: Filter{Since: Bound{At: clock.Now.Add(-72 * time.Hour)}, Contains: []json.RawMessage{rare}}, Limit: 1}
	page, err = List(ctx, b.pool, req)
	require.NoError(t, err)
	require.Len(t, page.Envelopes, 1)
	require.Positive(t, page.Scan.Indexed)
	require.NotNil(t, page.NextBeforeID)
	req.BeforeID = *page.NextBeforeID
	page, err = List(ctx, b.pool, req)
	require.NoError(t, err)
	require.Len(t, page.Envelopes, 1)
	require.Equal(t, old, page.Envelopes[0].ID)
	require.Positive(t, page.Scan.Searched, "the old day walked")
	require.False(t, page.Scan.Stopped)
}

// Paged through by the body or headers index, a search returns what the
// walk would: the same envelopes, newest first, across partitions and
// index batches, with or without another filter. The index's matches count against the
// budget, those of a lookup given up on (too common) too: a filter that
// rejects every match stops at the budget instead of reading every day's
// matches.
func TestSearchByIndexPagesLikeTheWalkAndKeepsItsBudget(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	pgtest.AwayFromMidnight(t, b.pool, 2*time.Minute) // the seed and List read the clock each
	clock, err := envelope.ReadClock(ctx, b.pool)
	require.NoError(t, err)
	const days, perDay = 10, 2100
	envelopetest.InsertMany(t, b.pool, days*perDay, func(i int) envelopetest.Row {
		return envelopetest.Row{Source: []string{"alpha", "beta"}[i%2], Status: []string{"done", "failed", "ignored", "resolved"}[i%4],
			ReceivedAt: clock.Now.Add(-time.Duration(i)*24*time.Hour/perDay - time.Second), ProcessedAt: clock.Now,
			Body:    fmt.Appendf(nil, `{"type":"t","data":{"k":"v%d","n":%d}}`, i%3, i),
			Headers: map[string]string{"X-K": fmt.Sprintf("v%d", i%3), "X-T": "t"}}
	})
	require.EqualValues(t, days*perDay, envelopetest.MoveBodies(t, b.pool))
	_, err = b.pool.Exec(ctx, `ANALYZE envelope, envelope_body`)
	require.NoError(t, err)
	since := Bound{At: clock.Now.Add(-(days + 1) * 24 * time.Hour)}
	v0 := []json.RawMessage{json.RawMessage(`{"data":{"k":"v0"}}`)}

	// v0 matches a third (700 a day: more than a batch of candidates, read
	// through the index), every type and X-T all (2,100 a day: more than
	// maxDayMatches, walked).
	for _, c := range []struct {
		source   string
		contains string
		header   string // X-K, or X-T when "t"
		want     int
	}{
		{"", `{"data":{"k":"v0"}}`, "", days * perDay / 3}, {"alpha", `{"data":{"k":"v0"}}`, "", days * perDay / 6}, {"", `{"type":"t"}`, "", days * perDay},
		{"", "", "v0", days * perDay / 3}, {"alpha", "", "v0", days * perDay / 6}, {"", "", "t", days * perDay},
		// Over the cap, but a source narrows the index's candidates: read
		// through the index (the walk would read two for each match).
		{"alpha", "", "t", days * perDay / 2},
	} {
		f := Filter{Source: c.source, Since: since}
		if c.contains != "" {
			f.Contains = []json.RawMessage{json.RawMessage(c.contains)}
		}
		name := "x-k"
		if c.header == "t" {
			name = "X-t"
		}
		if c.header != "" {
			f.Headers = map[string]string{name: c.header}
		}
		rows, err := b.pool.Query(ctx, `
			SELECT id FROM envelope_with_body
			 WHERE ($2 = '' OR payload @> $2::jsonb) AND ($3 = '' OR headers ->> $4 = $3) AND ($1 = '' OR source = $1)
			 ORDER BY id DESC`, c.source, c.contains, c.header, http.CanonicalHeaderKey(name))
		require.NoError(t, err)
		want, err := pgx.CollectRows(rows, pgx.RowTo[int64])
		require.NoError(t, err)
		require.Len(t, want, c.want)

		req := ListRequest{Filter: f, Limit: 1100}
		var got []int64
		var walked int64
		for pages := 0; ; pages++ {
			require.Less(t, pages, 30)
			page, err := List(ctx, b.pool, req)
			require.NoError(t, err)
			if c.want != days*perDay {
				require.Zero(t, page.Scan.Searched, "read by the index, not walked")
				require.Positive(t, page.Scan.Indexed)
			}
			walked += page.Scan.Searched
			require.False(t, page.Scan.Stopped)
			for _, e := range page.Envelopes {
				got = append(got, e.ID)
			}
			if page.NextBeforeID == nil {
				break
			}
			req.BeforeID = *page.NextBeforeID
		}
		require.Equal(t, want, got, "%+v", c)
		if c.want == days*perDay {
			// The whole days, not the partial ones at the window's ends.
			require.Greater(t, walked, int64(days-2)*perDay, "too common for the index: walked")
		}
	}

	// Yesterday alone, X-T: its lookup read maxDayMatches before it was
	// given up on (2,100 matches), and they count against the budget with
	// the envelopes walked after it.
	today := clock.Now.UTC().Truncate(24 * time.Hour)
	page, err := List(ctx, b.pool, ListRequest{Filter: Filter{Since: Bound{At: today.Add(-24 * time.Hour)}, Until: Bound{At: today}, Headers: map[string]string{"X-T": "t"}}, Limit: 50})
	require.NoError(t, err)
	require.Len(t, page.Envelopes, 50)
	require.Positive(t, page.Scan.Searched, "too common for the index: walked")
	require.EqualValues(t, maxDayMatches, page.Scan.Matches, "the lookup given up on is charged: %+v", page.Scan)
	require.Contains(t, page.Scan.String(), fmt.Sprintf("(%d index matches read)", maxDayMatches), "and said")

	// X-T (every envelope's, 2,100 a day) with a budget whose chunks are
	// 1,000: too common for its index's lookup; v0's body field (700 a
	// day) narrows it through the body's index instead, and no day is
	// walked.
	rows, err := b.pool.Query(ctx, `SELECT id FROM envelope_with_body WHERE payload @> $1::jsonb ORDER BY id DESC LIMIT 1000`, string(v0[0]))
	require.NoError(t, err)
	want, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	require.NoError(t, err)
	require.Len(t, want, 1000)
	page, err = List(ctx, b.pool, ListRequest{Filter: Filter{Since: since, Contains: v0, Headers: map[string]string{"X-T": "t"}}, Limit: 1000, ScanBudget: 8000})
	require.NoError(t, err)
	require.Zero(t, page.Scan.Searched, "read through the body index, not walked: %+v", page.Scan)
	// Over a whole day indexed: the page reached a day with over 1,000 X-T
	// matches (yesterday's at the latest), whatever the hour now.
	require.Greater(t, page.Scan.Indexed, int64(perDay), "%+v", page.Scan)
	require.False(t, page.Scan.Stopped)
	var got []int64
	for _, e := range page.Envelopes {
		got = append(got, e.ID)
	}
	require.Equal(t, want, got)

	// The same with a page of 3,000 (over four days of v0) and chunks of
	// 700: X-T's lookup is given up on where it first has too many matches,
	// and the days after are read through the body's index first (the one
	// that last completed), so the page fills within the budget. Were X-T's
	// tried first each day, each day would cost 1,400 of the budget, and
	// the search would stop short of the page.
	rows, err = b.pool.Query(ctx, `SELECT id FROM envelope_with_body WHERE payload @> $1::jsonb ORDER BY id DESC LIMIT 3000`, string(v0[0]))
	require.NoError(t, err)
	want, err = pgx.CollectRows(rows, pgx.RowTo[int64])
	require.NoError(t, err)
	require.Len(t, want, 3000)
	page, err = List(ctx, b.pool, ListRequest{Filter: Filter{Since: since, Contains: v0, Headers: map[string]string{"X-T": "t"}}, Limit: 3000, ScanBudget: 8 * 700})
	require.NoError(t, err)
	require.False(t, page.Scan.Stopped, "%+v", page.Scan)
	require.Zero(t, page.Scan.Searched, "%+v", page.Scan)
	got = got[:0]
	for _, e := range page.Envelopes {
		got = append(got, e.ID)
	}
	require.Equal(t, want, got)

	// 700 matches a day (UTC days cut the seed unevenly), a budget of 8
	// days' matches (chunks of 700), and a source no envelope has: days read
	// by the index until their matches reach the budget, then a stop.
	page, err = List(ctx, b.pool, ListRequest{Filter: Filter{Source: "gamma", Since: since, Contains: v0}, ScanBudget: 8 * perDay / 3})
	require.NoError(t, err)
	require.Empty(t, page.Envelopes)
	s := page.Scan
	require.True(t, s.Stopped, "%+v", s)
	require.LessOrEqual(t, s.Matches, s.Budget)
	require.Greater(t, s.Matches, s.Budget/2)
	require.Zero(t, s.Searched)
	require.NotNil(t, page.NextBeforeID)
	require.Contains(t, s.String(), fmt.Sprintf("(%d index matches read)", s.Matches))
}

// A header search reads the partitions that have the headers index
// (migration 00204) through it, as a body search reads the body index: a
// rare value is found with a budget far too small for the walk, its name
// in any case; a value that differs only in case is a candidate of the
// index (the headers are indexed lowercased) that the search's own check
// rejects; the lookup's plan is a bitmap scan of the window's partitions'
// indexes only; a value too common for the index is walked. Without the
// index (an operator's DROP INDEX), the search walks and finds the same.
func TestHeaderSearchReadsTheHeadersIndex(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	pgtest.AwayFromMidnight(t, b.pool, 2*time.Minute) // the seed and List read the clock each
	clock, err := envelope.ReadClock(ctx, b.pool)
	require.NoError(t, err)
	seedDays(t, b, clock.Now, 3, 400) // one every 3.6 minutes; w-8 is 30 minutes old
	rare := map[string]string{"webhook-ID": "w-8"}

	page, err := List(ctx, b.pool, ListRequest{Filter: Filter{Headers: rare}, ScanBudget: 16})
	require.NoError(t, err)
	require.Len(t, page.Envelopes, 1)
	require.Equal(t, "w-8", page.Envelopes[0].DeliveryID)
	s := page.Scan
	require.False(t, s.Stopped, "%+v", s)
	require.Zero(t, s.Searched, "nothing walked")
	require.Equal(t, s.Envelopes, s.Indexed, "the whole window (the counters' estimate), through the index")
	require.EqualValues(t, 1, s.Matches)
	require.Contains(t, s.String(), "through an index (1 index match read)")

	page, err = List(ctx, b.pool, ListRequest{Filter: Filter{Headers: map[string]string{"Webhook-Id": "W-8"}}, ScanBudget: 16})
	require.NoError(t, err)
	require.Empty(t, page.Envelopes, "values match exactly")
	require.EqualValues(t, 1, page.Scan.Matches, "the index's candidate, rejected by the check")
	require.Zero(t, page.Scan.Searched)

	page, err = List(ctx, b.pool, ListRequest{Filter: Filter{Source: "beta", Headers: rare}, ScanBudget: 16})
	require.NoError(t, err)
	require.Empty(t, page.Envelopes, "a candidate of another source")
	require.False(t, page.Scan.Stopped)

	// The lookup's plan: the headers indexes of today's and yesterday's
	// partitions (the default window), no other day's.
	sel, _ := listSelection(Filter{Headers: rare}, clock)
	chunks, err := envelope.PlanScan(ctx, b.pool, sel.Since, sel.Until, math.MaxInt64)
	require.NoError(t, err)
	sql, args := envelope.HeaderMatchesSQL(sel.Headers, chunks[len(chunks)-1].LowerID, chunks[0].UpperID, 51)
	// Named by 00204, or by PostgreSQL for a partition made since.
	requireLookupPlan(t, b, sql, args, chunks, `envelope_\d{8}_(?:headers|lower)_idx`, func(c envelope.Chunk) bool { return c.HeadersIndexed })

	// Half the envelopes have this tenant: more matches in a partition
	// than a chunk's worth (budget/8 = 10), so the search walks. The
	// window is yesterday (UTC), a whole day's partition: today's, in the
	// first hour after midnight, holds too few envelopes to pass a chunk's
	// worth, and is rightly read through the index.
	common := map[string]string{"X-Tenant": "t2"}
	yesterday := Filter{Headers: common, Until: Bound{At: clock.Now.UTC().Truncate(24 * time.Hour)}}
	page, err = List(ctx, b.pool, ListRequest{Filter: yesterday, ScanBudget: 80, Limit: 5})
	require.NoError(t, err)
	window, _ := listSelection(yesterday, clock)
	newest, err := envelope.Summaries(ctx, b.pool, window, 5, false)
	require.NoError(t, err)
	require.Len(t, newest, 5)
	require.Equal(t, newest, page.Envelopes)
	require.Zero(t, page.Scan.Indexed)
	require.Positive(t, page.Scan.Searched)

	// Dropped (docs/operations.md): no day has it, and the search walks.
	_, err = b.pool.Exec(ctx, `DROP INDEX envelope_headers_idx`)
	require.NoError(t, err)
	page, err = List(ctx, b.pool, ListRequest{Filter: Filter{Headers: rare}, ScanBudget: 4})
	require.NoError(t, err)
	require.Empty(t, page.Envelopes)
	require.True(t, page.Scan.Stopped, "walked, under a budget of ~15 minutes of the seed")
	require.Zero(t, page.Scan.Indexed)
	page, err = List(ctx, b.pool, ListRequest{Filter: Filter{Headers: rare}})
	require.NoError(t, err)
	require.Len(t, page.Envelopes, 1)
	require.Equal(t, "w-8", page.Envelopes[0].DeliveryID)
	require.Positive(t, page.Scan.Searched)
}
