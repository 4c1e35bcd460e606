package audit_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/inboxhq/inbox/internal/pgtest"
)

const cookbookPath = "../../docs/audit.md"

// minQuestions is the fewest questions the cookbook may hold.
const minQuestions = 12

// question is one ### heading of the cookbook and its SQL block.
type question struct {
	Heading string
	SQL     string
	Line    int
}

// parseCookbook returns the cookbook's questions: every ### heading must be
// followed by exactly one ```sql block, and every ```sql block must sit under
// a ### heading.
func parseCookbook(md []byte) ([]question, error) {
	var qs []question
	var cur *question
	var inSQL, inOther bool
	var sql strings.Builder
	sc := bufio.NewScanner(bytes.NewReader(md))
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		trimmed := strings.TrimSpace(line)
		switch {
		case inSQL && trimmed == "```":
			inSQL = false
			if strings.TrimSpace(sql.String()) == "" {
				return nil, fmt.Errorf("line %d: empty sql block under %q", n, cur.Heading)
			}
			cur.SQL = sql.String()
			sql.Reset()
		case inSQL:
			sql.WriteString(line + "\n")
		case inOther:
			if strings.HasPrefix(trimmed, "```") {
				inOther = false
			}
		case trimmed == "```sql":
			if cur == nil {
				return nil, fmt.Errorf("line %d: sql block outside a ### question", n)
			}
			if cur.SQL != "" {
				return nil, fmt.Errorf("line %d: second sql block under %q", n, cur.Heading)
			}
			inSQL = true
		case strings.HasPrefix(trimmed, "```"):
			inOther = true
		case strings.HasPrefix(line, "### "):
			if cur != nil && cur.SQL == "" {
				return nil, fmt.Errorf("line %d: question %q has no sql block", cur.Line, cur.Heading)
			}
			qs = append(qs, question{Heading: strings.TrimSpace(line[4:]), Line: n})
			cur = &qs[len(qs)-1]
		case strings.HasPrefix(line, "#"):
			if cur != nil && cur.SQL == "" {
				return nil, fmt.Errorf("line %d: question %q has no sql block", cur.Line, cur.Heading)
			}
			cur = nil
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if inSQL || inOther {
		return nil, fmt.Errorf("unterminated code block at end of file")
	}
	if cur != nil && cur.SQL == "" {
		return nil, fmt.Errorf("line %d: question %q has no sql block", cur.Line, cur.Heading)
	}
	seen := map[string]bool{}
	for _, q := range qs {
		if seen[q.Heading] {
			return nil, fmt.Errorf("line %d: question %q appears twice", q.Line, q.Heading)
		}
		seen[q.Heading] = true
	}
	return qs, nil
}

func TestParseCookbook(t *testing.T) {
	t.Parallel()
	qs, err := parseCookbook([]byte("# T\n\nintro\n\n```text\n### not a heading\n```\n\n## Group\n\n### Q1?\n\nWhy.\n\n```sql\nSELECT 1;\n```\n\n### Q2\n```sql\nSELECT\n  2;\n```\n"))
	require.NoError(t, err)
	require.Equal(t, []question{{Heading: "Q1?", SQL: "SELECT 1;\n", Line: 11}, {Heading: "Q2", SQL: "SELECT\n  2;\n", Line: 19}}, qs)

	for name, md := range map[string]string{
		"sql outside a question":  "## G\n```sql\nSELECT 1;\n```\n",
		"question without sql":    "### Q\ntext\n### R\n```sql\nSELECT 1;\n```\n",
		"last question lacks sql": "### Q\n```sql\nSELECT 1;\n```\n### R\n",
		"two blocks":              "### Q\n```sql\nSELECT 1;\n```\n```sql\nSELECT 2;\n```\n",
		"empty block":             "### Q\n```sql\n```\n",
		"unterminated":            "### Q\n```sql\nSELECT 1;\n",
		"duplicate heading":       "### Q\n```sql\nSELECT 1;\n```\n### Q\n```sql\nSELECT 1;\n```\n",
	} {
		_, err := parseCookbook([]byte(md))
		require.Error(t, err, name)
	}
}

// result is a query's rows, each column as JSON (PostgreSQL's to_jsonb).
type result []map[string]any

// col returns row i's column as text: numbers as written, NULL as "NULL",
// objects as JSON.
func (r result) col(t *testing.T, i int, name string) string {
	t.Helper()
	require.Less(t, i, len(r), "row %d of %d", i, len(r))
	v, ok := r[i][name]
	require.True(t, ok, "no column %q in %v", name, r[i])
	switch v := v.(type) {
	case nil:
		return "NULL"
	case string:
		return v
	case json.Number:
		return v.String()
	case bool:
		return fmt.Sprint(v)
	default:
		b, err := json.Marshal(v)
		require.NoError(t, err)
		return string(b)
	}
}

// rows renders the named columns of every row as "a|b|c".
func (r result) rows(t *testing.T, names ...string) []string {
	t.Helper()
	out := make([]string, len(r))
	for i := range r {
		vals := make([]string, len(names))
		for j, n := range names {
			vals[j] = r.col(t, i, n)
		}
		out[i] = strings.Join(vals, "|")
	}
	return out
}

// checks maps a question's heading to what its answer must be on the seeded
// data (see seed for the story behind each number).
var checks = map[string]func(t *testing.T, r result){
	"Which delivery caused this ledger transaction?": func(t *testing.T, r result) {
		require.Equal(t, []string{"42|payment|m_acme|5000|USD|standard:m_acme:payment:pay_2|payments|standard|msg_002|payment.succeeded|Dr psp_clearing 5000 USD, Cr sales 5000 USD"},
			r.rows(t, "transaction_id", "kind", "merchant", "amount_minor", "currency", "idempotency_key", "source", "provider", "delivery_id", "event_type", "summary"))
	},
	"The full story of one delivery": func(t *testing.T, r result) {
		require.Equal(t, []string{
			"received|payment.succeeded",
			"attempt 1: retry|downstream timeout",
			"attempt 2: retry|downstream timeout",
			"attempt 3: retry|downstream timeout",
			"attempt 4: retry|downstream timeout",
			"attempt 5: failed|attempts exhausted (5 of 5): downstream timeout",
			"replayed by alice|INC-42: database failover, retrying failed payments",
			"ledger payment 46|m_globex 1500 EUR",
			"attempt 1: done|NULL",
		}, r.rows(t, "what", "detail"))
	},
	"Everything received from a source yesterday, and what became of it": func(t *testing.T, r result) {
		require.Equal(t, []string{
			"msg_002|done|3|done|42|5000",
			"msg_003|done|1|done|43|2000",
			"msg_004|done|1|done|44|3000",
			"msg_006|failed|1|failed|NULL|NULL",
			"msg_008|done|6|done|46|1500",
		}, r.rows(t, "delivery_id", "status", "attempts", "last_outcome", "ledger_transaction_id", "ledger_amount_minor"))
	},
	"Deliveries that needed more than 2 attempts": func(t *testing.T, r result) {
		require.Equal(t, []string{
			"msg_008|done|6|6",
			"msg_002|done|3|3",
			"wh-3|failed|3|3",
		}, r.rows(t, "delivery_id", "status", "attempts", "attempt_rows"))
	},
	"How many times each provider retried": func(t *testing.T, r result) {
		require.Equal(t, []string{
			"payments|standard|7|2|1|2|14|2|1|1",
			"gh|github|2|1|1|1|2|0|1|0",
			"stripe|stripe|5|1|1|1|5|1|0|1",
			"shop|shopify|3|0|0|0|4|1|0|0",
		}, r.rows(t, "source", "provider", "deliveries", "duplicates_received", "deliveries_with_duplicates", "max_duplicates",
			"attempts", "deliveries_retried", "conflicts", "replays"))
	},
	"What was replayed, by whom, and why": func(t *testing.T, r result) {
		require.Equal(t, []string{
			"alice|INC-42: database failover, retrying failed payments|msg_008|failed|done|1|done|{\"ids\":[1007]}",
			"bob|customer handler deployed|evt_2|ignored|ignored|1|ignored|{\"event_type\":\"customer.created\",\"source\":\"stripe\",\"status\":\"ignored\"}",
		}, r.rows(t, "actor", "reason", "delivery_id", "prior_status", "current_status", "job_attempts", "job_last_outcome", "filter"))
		require.Equal(t, "NULL", r.col(t, 0, "batch_id"), "a replay by id has no batch")
		require.NotEqual(t, "NULL", r.col(t, 1, "batch_id"), "a bulk replay has a batch")
	},
	"Conflicting deliveries: a delivery id reused with a different body": func(t *testing.T, r result) {
		require.Equal(t, []string{
			"gh|a1b2c3d4-0000-11ef-8000-000000000001|github|done",
			"payments|msg_005|standard|done",
		}, sortedRows(r.rows(t, "source", "delivery_id", "provider", "envelope_status")))
		for i := range r {
			require.NotEqual(t, r.col(t, i, "original_sha256"), r.col(t, i, "conflicting_sha256"))
			require.Len(t, r.col(t, i, "original_sha256"), 64)
		}
	},
	"How a conflicting body differs from the stored one": func(t *testing.T, r result) {
		// msg_005 was resent with 70000 for 7000: data differs, nothing else.
		require.Equal(t, []string{"data"}, r.rows(t, "key"))
		require.Contains(t, r.col(t, 0, "stored_value"), `"amount_minor":7000`)
		require.Contains(t, r.col(t, 0, "conflicting_value"), `"amount_minor":70000`)
	},
	"The bodies of a conflict, side by side (any body, JSON or not)": func(t *testing.T, r result) {
		require.Len(t, r.rows(t, "conflict_id"), 1)
		require.Contains(t, r.col(t, 0, "stored_text"), `"amount_minor":7000`)
		require.Contains(t, r.col(t, 0, "conflicting_text"), `"amount_minor":70000`)
	},
	"Envelopes stuck pending for longer than an hour": func(t *testing.T, r result) {
		require.Equal(t, []string{"stripe|evt_5|0|3|snoozed"}, r.rows(t, "source", "delivery_id", "attempts", "attempt_rows", "last_outcome"))
	},
	"Pending envelopes with no live job (should return no rows)": empty,
	"Failed envelopes by cause": func(t *testing.T, r result) {
		require.Equal(t, []string{
			`payments|unknown_currency|1|permanent: standard payment.succeeded: unknown currency "XXX"`,
			"shop|internal|1|attempts exhausted (3 of 3): shopify admin api: 503 Service Unavailable",
		}, r.rows(t, "source", "cause", "envelopes", "latest_error"))
	},
	"Retries and snoozes by cause over the last week": func(t *testing.T, r result) {
		require.Equal(t, []string{
			"payments|timeout|retry|4|1",
			"stripe|payment_not_posted|snoozed|3|1",
			"payments|internal|retry|2|1",
			"shop|internal|retry|2|1",
		}, r.rows(t, "source", "cause", "outcome", "attempts", "envelopes"))
	},
	"Envelopes whose body contains a value": func(t *testing.T, r result) {
		// Since yesterday: msg_001 (3 days old) is outside the window.
		require.Equal(t, []string{"msg_006|failed|unknown_currency", "msg_004|done|NULL", "msg_003|done|NULL", "msg_002|done|NULL"},
			r.rows(t, "delivery_id", "status", "last_cause"))
	},
	"Envelopes with a header value": func(t *testing.T, r result) {
		require.Equal(t, []string{"wh-2", "wh-3", "wh-1"}, r.rows(t, "delivery_id"), "newest received first")
	},
	"Failed envelopes by reason": func(t *testing.T, r result) {
		require.Equal(t, []string{
			"payments|permanent|1",
			"shop|attempts exhausted (N of N)|1",
		}, r.rows(t, "source", "reason", "envelopes"))
	},
	"Ignored events by type": func(t *testing.T, r result) {
		require.Equal(t, []string{"stripe|stripe|customer.created|1"}, r.rows(t, "source", "provider", "event_type", "envelopes"))
	},
	"Balances per merchant as of a time": func(t *testing.T, r result) {
		// Only what was posted before yesterday: pay_1 (3 days ago) and pi_2
		// (40 days ago).
		require.Equal(t, []string{
			"acct_1|psp_clearing|JPY|1000|1",
			"acct_1|sales|JPY|-1000|1",
			"m_acme|psp_clearing|USD|10000|1",
			"m_acme|sales|USD|-10000|1",
		}, r.rows(t, "merchant", "account", "currency", "balance_minor", "entries"))
	},
	"Balances per merchant now": func(t *testing.T, r result) {
		require.Equal(t, []string{
			"acct_1|psp_clearing|JPY|1000",
			"acct_1|psp_clearing|USD|0",
			"acct_1|refunds|USD|2500",
			"acct_1|sales|JPY|-1000",
			"acct_1|sales|USD|-2500",
			"acme.myshopify.com|psp_clearing|USD|1999",
			"acme.myshopify.com|sales|USD|-1999",
			"m_acme|psp_clearing|USD|10000",
			"m_acme|refunds|USD|5000",
			"m_acme|sales|USD|-15000",
			"m_globex|psp_clearing|EUR|8500",
			"m_globex|sales|EUR|-8500",
		}, r.rows(t, "merchant", "account", "currency", "balance_minor"))
	},
	"Payments refunded more than once, and their refunds": func(t *testing.T, r result) {
		require.Equal(t, []string{"standard:m_acme:payment:pay_1|m_acme|USD|10000|2|5000|5000|payments|msg_001"},
			r.rows(t, "payment_key", "merchant", "currency", "amount_minor", "refunds", "refunded_minor", "remaining_minor", "source", "delivery_id"))
	},
	"Does every ledger transaction balance? (should return no rows)":          empty,
	"Does the whole ledger sum to zero per currency? (should return no rows)": empty,
	"Ledger postings without a done envelope (should return no rows)":         empty,
	"Envelopes whose body was purged by retention": func(t *testing.T, r result) {
		require.Equal(t, []string{"gh|github|a1b2c3d4-0000-11ef-8000-000000000001|done|1|1"},
			r.rows(t, "source", "provider", "delivery_id", "status", "duplicates", "conflicts"))
		require.NotEqual(t, "NULL", r.col(t, 0, "body_purged_at"))
		require.Len(t, r.col(t, 0, "body_sha256"), 64, "the tombstone keeps the body's hash")
	},
}

// unchecked lists the questions whose answers depend on the clock or on
// timings, and are only run.
var unchecked = map[string]bool{
	"Deliveries received per day, by source and status, over the last week": true,
	"How long deliveries take to process, by source":                        true,
	// The seed's failures are yesterday at fixed hours: which of them fall in
	// the last 24 hours depends on the time of day. internal/envelope's
	// TestFailuresBucketsAttemptsByCause checks envelope.Failures, which
	// counts the same attempts, at fixed times.
	"Failed and retried attempts per hour, by cause (the console's Failures chart)": true,
	// The seed has no backfill; internal/backfill's tests store through it
	// against a fake Stripe and check backfill_run and envelope.origin.
	"Events the provider never delivered, recovered by backfill": true,
}

func empty(t *testing.T, r result) {
	t.Helper()
	require.Empty(t, r, "this query must return no rows")
}

func sortedRows(rows []string) []string {
	sort.Strings(rows)
	return rows
}

func TestCookbookQueriesRunAndAnswer(t *testing.T) {
	t.Parallel()
	md, err := os.ReadFile(cookbookPath)
	require.NoError(t, err)
	qs, err := parseCookbook(md)
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(qs), minQuestions, "the cookbook must hold at least %d questions", minQuestions)

	headings := map[string]bool{}
	for _, q := range qs {
		headings[q.Heading] = true
		_, checked := checks[q.Heading]
		require.True(t, checked || unchecked[q.Heading], "question %q (line %d) has no check: add one to checks, or to unchecked with a reason", q.Heading, q.Line)
		require.False(t, checked && unchecked[q.Heading], "question %q is both checked and unchecked", q.Heading)
	}
	for h := range checks {
		require.True(t, headings[h], "checks names %q, which the cookbook no longer asks", h)
	}
	for h := range unchecked {
		require.True(t, headings[h], "unchecked names %q, which the cookbook no longer asks", h)
	}
	require.GreaterOrEqual(t, len(checks), 8)

	pool := pgtest.NewPool(t)
	// The seed's "yesterday" and the queries' now() must fall on the same day.
	pgtest.AwayFromMidnight(t, pool, 2*time.Minute)
	seed(t, pool)
	for _, q := range qs {
		t.Run(q.Heading, func(t *testing.T) {
			r := runQuery(t, pool, q)
			if check := checks[q.Heading]; check != nil {
				check(t, r)
			}
			if want, ok := plans[q.Heading]; ok {
				require.Regexp(t, want, explainQuery(t, pool, q))
			}
		})
	}
	for h := range plans {
		require.True(t, headings[h], "plans names %q, which the cookbook no longer asks", h)
	}
}

// plans are the questions whose plan must use an index, and what their
// plan must show: a test's tables are small enough for a sequential scan
// to be cheapest, so explainQuery turns those off.
var plans = map[string]string{
	// Each day's body index (00203), not a walk of the bodies.
	"Envelopes whose body contains a value": `Bitmap Index Scan on envelope_body_\d{8}_payload_idx`,
	// Each day's headers index (00204, which names it; PostgreSQL names a
	// later partition's), not a walk of the rows.
	"Envelopes with a header value": `Bitmap Index Scan on envelope_\d{8}_(?:headers|lower)_idx`,
}

// explainQuery returns q's plan, planned with sequential scans off.
func explainQuery(t *testing.T, pool *pgxpool.Pool, q question) string {
	t.Helper()
	ctx := context.Background()
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = tx.Exec(ctx, `SET LOCAL enable_seqscan = off`)
	require.NoError(t, err)
	var plan strings.Builder
	rows, err := tx.Query(ctx, `EXPLAIN `+q.SQL)
	require.NoError(t, err)
	for rows.Next() {
		var line string
		require.NoError(t, rows.Scan(&line))
		plan.WriteString(line + "\n")
	}
	require.NoError(t, rows.Err())
	return plan.String()
}

// runQuery runs q's SQL exactly as written (it must succeed), then again
// wrapped to read each row as JSON, and returns the rows.
func runQuery(t *testing.T, pool *pgxpool.Pool, q question) result {
	t.Helper()
	ctx := context.Background()
	rows, err := pool.Query(ctx, q.SQL)
	require.NoError(t, err, "line %d:\n%s", q.Line, q.SQL)
	n := 0
	for rows.Next() {
		n++
	}
	require.NoError(t, rows.Err(), "line %d:\n%s", q.Line, q.SQL)

	body := strings.TrimSuffix(strings.TrimSpace(q.SQL), ";")
	require.NotContains(t, body, ";", "line %d: one statement per question", q.Line)
	var js []byte
	// jsonb_agg keeps the subquery's order (its ORDER BY).
	err = pool.QueryRow(ctx, `SELECT coalesce(jsonb_agg(to_jsonb(q)), '[]')::text FROM (`+body+`) q`).Scan(&js)
	require.NoError(t, err)
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.UseNumber()
	var r result
	require.NoError(t, dec.Decode(&r))
	require.Len(t, r, n)
	return r
}
