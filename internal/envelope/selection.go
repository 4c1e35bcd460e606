package envelope

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inboxhq/inbox/internal/pg"
)

// Selection selects envelopes by their columns: zero fields select
// everything, set fields combine with AND. It holds no policy: callers
// (admin.Filter) validate what they put in it and resolve relative times
// against the database's clock first. Its SQL is parameterized: values
// never enter the SQL text.
type Selection struct {
	IDs    []int64
	Source string
	Status Status
	// NotStatus, when set, leaves out the envelopes in that status.
	NotStatus  Status
	EventType  string
	DeliveryID string
	// Cause is envelope.last_cause.
	Cause string
	// Contains are JSON documents the parsed body (payload) must contain
	// (jsonb @>).
	Contains []json.RawMessage
	// Headers must have these exact values; names match in any case.
	Headers map[string]string
	// Since (inclusive) and Until (exclusive) bound received_at; zero is no
	// bound. They bound ids too (IDAt, IDBefore), so that a window reads
	// only its partitions: from Since only when LegacyUntil is not after it.
	Since, Until time.Time
	// LegacyUntil is Clock.LegacyUntil: before it, ids do not follow
	// received_at.
	LegacyUntil time.Time
	// Replayable keeps only envelopes whose body or parsed payload
	// retention has not dropped: those that can be processed again.
	Replayable bool
	// AfterID and BeforeID, when not 0, keep only ids above or below them
	// (the cursors of replay batches and list pages).
	AfterID, BeforeID int64
	// MaxID, when not 0, keeps only ids up to it: a selection as it stood
	// when it was previewed, without what arrived since.
	MaxID int64
}

// Where returns s as a SQL condition on the envelope table (columns
// unqualified) and its arguments, numbered from $1. An empty selection
// returns "TRUE".
func (s Selection) Where() (string, []any) {
	var q sqlBuilder
	s.appendTo(&q)
	return q.where(), q.args
}

func (s Selection) appendTo(q *sqlBuilder) {
	start := len(q.conds)
	if s.Replayable {
		q.cond("(body IS NOT NULL OR payload IS NOT NULL OR EXISTS (" + bodyQuery("1") + "))")
	}
	var ids []string // the id bounds (see below), and the ids asked for
	if len(s.IDs) > 0 {
		ids = append(ids, "= ANY("+q.arg(s.IDs)+"::bigint[])")
		q.cond("id " + ids[0])
	}
	if s.Source != "" {
		q.cond("source = " + q.arg(s.Source))
	}
	if s.Status != "" {
		q.cond("status = " + q.arg(string(s.Status)))
	}
	if s.NotStatus != "" {
		q.cond("status <> " + q.arg(string(s.NotStatus)))
	}
	if s.EventType != "" {
		q.cond("event_type = " + q.arg(s.EventType))
	}
	if s.DeliveryID != "" {
		// Through envelope_key: no index of the partitioned envelope table
		// has the delivery id. An array (an InitPlan, run once), not IN: the
		// partitions are probed by primary key for its ids (at most one per
		// source), where a semi join may walk them newest first.
		arg := q.arg(s.DeliveryID)
		q.cond("id = ANY(ARRAY(SELECT k.envelope_id FROM envelope_key k WHERE k.delivery_id = " + arg + ")) AND delivery_id = " + arg)
	}
	if s.Cause != "" {
		q.cond("last_cause = " + q.arg(s.Cause))
	}
	for _, c := range s.Contains {
		// A literal text argument cast to jsonb: the planner sees the value
		// (customPlan). A failed or resolved envelope keeps its payload in
		// its row, so status = failed uses envelope_failed_payload_idx; any
		// other reads envelope_body's when the row has none.
		if s.Status == StatusFailed || s.Status == StatusResolved {
			q.cond("payload @> " + q.arg(string(c)) + "::jsonb")
		} else {
			q.cond("coalesce(payload, (" + bodyQuery("b.payload") + ")) @> " + q.arg(string(c)) + "::jsonb")
		}
	}
	names := make([]string, 0, len(s.Headers))
	for k := range s.Headers {
		names = append(names, k)
	}
	slices.Sort(names) // a stable SQL text
	for _, k := range names {
		// Names in any case: ingest stores them canonical (X-Github-Event),
		// and nothing else promises to. A list reads its candidates from
		// envelope_headers_idx (HeaderMatches) where a day has it, and
		// checks each with this condition, which the walk of a day without
		// it runs on every envelope.
		// Both names lowered by PostgreSQL, as the index's expression
		// lowers them (Go's and the database's lowercasing may differ).
		q.cond("EXISTS (SELECT 1 FROM jsonb_each_text(headers) h WHERE lower(h.key) = lower(" + q.arg(k) + ")" +
			" AND h.value = " + q.arg(s.Headers[k]) + ")")
	}
	// The window's bounds on ids (IDAt, IDBefore, the cursors) prune the
	// partitions of envelope, and of envelope_body in the conditions above
	// that read the body.
	if !s.Since.IsZero() {
		q.cond("received_at >= " + q.arg(s.Since))
		if !s.Since.Before(s.LegacyUntil) {
			ids = append(ids, ">= "+q.arg(IDAt(s.Since)))
			q.cond("id " + ids[len(ids)-1])
		}
	}
	if !s.Until.IsZero() {
		// Legacy ids are all below any IDBefore: no exception needed.
		until := q.arg(s.Until)
		ids = append(ids, "< "+q.arg(IDBefore(s.Until)))
		q.cond("received_at < " + until + " AND id " + ids[len(ids)-1])
	}
	if s.AfterID != 0 {
		ids = append(ids, "> "+q.arg(s.AfterID))
		q.cond("id " + ids[len(ids)-1])
	}
	if s.MaxID != 0 {
		ids = append(ids, "<= "+q.arg(s.MaxID))
		q.cond("id " + ids[len(ids)-1])
	}
	if s.BeforeID != 0 {
		ids = append(ids, "< "+q.arg(s.BeforeID))
		q.cond("id " + ids[len(ids)-1])
	}
	for i := start; i < len(q.conds); i++ {
		q.conds[i] = strings.ReplaceAll(q.conds[i], bodyBounds, within("b.id", ids))
	}
	q.ids = append(q.ids, ids...)
}

// bodyBounds marks where bodyQuery's subquery takes the window's id bounds,
// known once every condition is written.
const bodyBounds = "/*window*/"

// bodyQuery selects what of envelope_body's row of the envelope under
// selection (envelope.id); appendTo bounds it by the window's ids, which
// prune envelope_body's partitions when planned.
func bodyQuery(what string) string {
	return "SELECT " + what + " FROM envelope_body b WHERE b.id = envelope.id" + bodyBounds
}

// Indexed reports whether one statement serves s, through an index or
// the window's partitions: false for a body containment (unless it selects
// failed envelopes: envelope_failed_payload_idx) or a header value, which
// a list reads day by day through their own indexes (BodyMatches,
// HeaderMatches) or walks under a budget.
func (s Selection) Indexed() bool {
	if len(s.IDs) > 0 || s.DeliveryID != "" {
		return true
	}
	return len(s.Headers) == 0 && (len(s.Contains) == 0 || s.Status == StatusFailed)
}

// sqlBuilder collects AND-ed conditions and their numbered arguments.
type sqlBuilder struct {
	conds []string
	args  []any
	// ids are the window's id bounds appendTo wrote (">= $2", ...), for
	// the subqueries of other tables on envelope's partition bounds.
	ids []string
}

// arg adds v as the next argument and returns its placeholder.
func (q *sqlBuilder) arg(v any) string {
	q.args = append(q.args, v)
	return "$" + strconv.Itoa(len(q.args))
}

func (q *sqlBuilder) cond(c string) { q.conds = append(q.conds, c) }

func (q *sqlBuilder) where() string {
	if len(q.conds) == 0 {
		return "TRUE"
	}
	return strings.Join(q.conds, " AND ")
}

// CustomPlan prepends pg.PlanEachCall to args: the query is planned with its
// values on every call, never with a cached generic plan. A selection's best
// plan depends on its values (a rare status wants the status index, a common
// one the primary key), and a generic plan cannot hash an = ANY list. Every
// statement built from a Selection runs this way.
func CustomPlan(args []any) []any {
	return append([]any{pg.PlanEachCall}, args...)
}

// Summary is one envelope in a listing: everything but its body, payload,
// headers and result.
type Summary struct {
	ID          int64      `json:"id"`
	Source      string     `json:"source"`
	Provider    string     `json:"provider"`
	DeliveryID  string     `json:"delivery_id"`
	EventType   string     `json:"event_type"`
	Status      Status     `json:"status"`
	ReceivedAt  time.Time  `json:"received_at"`
	ProcessedAt *time.Time `json:"processed_at"`
	Attempts    int        `json:"attempts"`
	LastError   *string    `json:"last_error"`
	// LastCause is LastError's code (labels.Cause), nil when none.
	LastCause  *string `json:"last_cause"`
	Duplicates int     `json:"duplicates"`
	// Conflicts counts the resends of its delivery id with another body
	// (envelope_conflict rows, each counting its repeats once).
	Conflicts int `json:"conflicts"`
	BodySize  int `json:"body_size"`
	// Reason is why an ignored envelope was stored but not routed (its
	// result's "reason": no handler for its event type, or it has none), or
	// why an operator resolved a resolved one (its latest envelope_resolution
	// row's reason); nil for other statuses.
	Reason *string `json:"reason"`
}

// summaryColumnsWithin is summaryDest's columns. The subqueries of
// duplicates and conflicts (partitioned on envelope's bounds) take the
// statement's id bounds ids (each an operator and a placeholder, as "< $3"),
// so the planner keeps only the window's partitions: against envelope.id
// alone, each was planned over every partition kept.
func summaryColumnsWithin(ids []string) string {
	return `id, source, provider, delivery_id, event_type, status, received_at,
	processed_at, attempts, last_error, last_cause,
	(SELECT count(*) FROM envelope_duplicate d WHERE d.envelope_id = envelope.id` + within("d.envelope_id", ids) + `),
	(SELECT count(*) FROM envelope_conflict c WHERE c.envelope_id = envelope.id` + within("c.envelope_id", ids) + `), body_size,
	CASE WHEN status = 'ignored' THEN result->>'reason'
	     WHEN status = 'resolved' THEN (SELECT r.reason FROM envelope_resolution r
	                                      WHERE r.envelope_id = envelope.id AND r.action = 'resolve' ORDER BY r.id DESC LIMIT 1) END`
}

// within is " AND col <bound>" for each of the id bounds ids.
func within(col string, ids []string) string {
	var b strings.Builder
	for _, bound := range ids {
		b.WriteString(" AND " + col + " " + bound)
	}
	return b.String()
}

// summaryDest returns the scan destinations of summaryColumnsWithin into s.
func summaryDest(s *Summary) []any {
	return []any{&s.ID, &s.Source, &s.Provider, &s.DeliveryID, &s.EventType, &s.Status, &s.ReceivedAt,
		&s.ProcessedAt, &s.Attempts, &s.LastError, &s.LastCause, &s.Duplicates, &s.Conflicts, &s.BodySize, &s.Reason}
}

// Summaries returns up to limit of the envelopes s selects, newest (highest
// id) first or, with oldestFirst, lowest id first; an empty, non-nil slice
// when none matches.
func Summaries(ctx context.Context, q pg.Querier, s Selection, limit int, oldestFirst bool) ([]Summary, error) {
	sql, args := SummariesSQL(s, limit, oldestFirst)
	rows, err := q.Query(ctx, sql, CustomPlan(args)...)
	if err != nil {
		return nil, fmt.Errorf("list envelopes: %w", err)
	}
	out := []Summary{}
	defer rows.Close()
	for rows.Next() {
		var sum Summary
		if err := rows.Scan(summaryDest(&sum)...); err != nil {
			return nil, fmt.Errorf("list envelopes: %w", err)
		}
		out = append(out, sum)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list envelopes: %w", err)
	}
	return out, nil
}

// SummariesSQL is the statement Summaries runs and its arguments (to run
// with CustomPlan, as Summaries does): for a test of its plan.
func SummariesSQL(s Selection, limit int, oldestFirst bool) (string, []any) {
	var b sqlBuilder
	s.appendTo(&b)
	order := "DESC"
	if oldestFirst {
		order = "ASC"
	}
	return `SELECT ` + summaryColumnsWithin(b.ids) + ` FROM envelope WHERE ` + b.where() + ` ORDER BY id ` + order + ` LIMIT ` + b.arg(limit), b.args
}

// Count returns how many envelopes s selects.
func Count(ctx context.Context, q pg.Querier, s Selection) (int, error) {
	where, args := s.Where()
	var n int
	if err := q.QueryRow(ctx, `SELECT count(*) FROM envelope WHERE `+where, CustomPlan(args)...).Scan(&n); err != nil {
		return 0, fmt.Errorf("count envelopes: %w", err)
	}
	return n, nil
}

// CountUpTo counts the envelopes s selects, stopping after limit of them:
// many matches cost limit rows; few cost what finding them costs (a filter
// no index serves reads the table, as the page's own query does).
func CountUpTo(ctx context.Context, q pg.Querier, s Selection, limit int) (int, error) {
	where, args := s.Where()
	args = append(args, limit)
	var n int
	sql := fmt.Sprintf(`SELECT count(*) FROM (SELECT 1 FROM envelope WHERE %s LIMIT $%d) AS m`, where, len(args))
	if err := q.QueryRow(ctx, sql, CustomPlan(args)...).Scan(&n); err != nil {
		return 0, fmt.Errorf("count envelopes: %w", err)
	}
	return n, nil
}

// CountByStatus counts the envelopes s selects per status, and returns the
// highest id among them (0 when none), in one statement.
func CountByStatus(ctx context.Context, q pg.Querier, s Selection) (map[Status]int, int64, error) {
	where, args := s.Where()
	rows, err := q.Query(ctx, `SELECT status, count(*), max(id) FROM envelope WHERE `+where+` GROUP BY 1`, CustomPlan(args)...)
	if err != nil {
		return nil, 0, fmt.Errorf("count envelopes by status: %w", err)
	}
	out := map[Status]int{}
	var st Status
	var n int
	var top, maxID int64
	if _, err := pgx.ForEachRow(rows, []any{&st, &n, &top}, func() error {
		out[st], maxID = n, max(maxID, top)
		return nil
	}); err != nil {
		return nil, 0, fmt.Errorf("count envelopes by status: %w", err)
	}
	return out, maxID, nil
}

// MatchingIDs returns the ids s selects, lowest first, at most limit.
func MatchingIDs(ctx context.Context, q pg.Querier, s Selection, limit int) ([]int64, error) {
	var b sqlBuilder
	s.appendTo(&b)
	rows, err := q.Query(ctx, `SELECT id FROM envelope WHERE `+b.where()+` ORDER BY id LIMIT `+b.arg(limit), CustomPlan(b.args)...)
	if err != nil {
		return nil, fmt.Errorf("list matching ids: %w", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return nil, fmt.Errorf("list matching ids: %w", err)
	}
	return ids, nil
}

// Exists reports whether s selects any envelope.
func Exists(ctx context.Context, q pg.Querier, s Selection) (bool, error) {
	where, args := s.Where()
	var ok bool
	if err := q.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM envelope WHERE `+where+`)`, CustomPlan(args)...).Scan(&ok); err != nil {
		return false, fmt.Errorf("look for envelopes: %w", err)
	}
	return ok, nil
}

// CountLive returns how many of the envelopes s selects have a processing
// job still waiting or running. It is driven by the live jobs (few,
// normally), each looked up by the envelope's primary key.
func CountLive(ctx context.Context, q pg.Querier, s Selection) (int, error) {
	var b sqlBuilder
	s.appendTo(&b)
	where := b.where()
	sql := `
		SELECT count(*)
		  FROM (SELECT DISTINCT ` + jobEnvelopeID + ` AS id
		          FROM river_job j
		         WHERE j.kind = ` + b.arg(ProcessArgs{}.Kind()) + `
		           AND j.state = ANY(` + b.arg(LiveJobStates()) + `::river_job_state[])) AS j
		 WHERE EXISTS (SELECT 1 FROM envelope WHERE envelope.id = j.id AND ` + where + `)`
	var n int
	if err := q.QueryRow(ctx, sql, CustomPlan(b.args)...).Scan(&n); err != nil {
		return 0, fmt.Errorf("count queued envelopes: %w", err)
	}
	return n, nil
}

// Purged returns, in id order, those of ids whose body and parsed payload
// retention dropped: there is nothing left to process.
func Purged(ctx context.Context, q pg.Querier, ids []int64) ([]int64, error) {
	rows, err := q.Query(ctx, `
		SELECT id FROM envelope
		 WHERE id = ANY($1::bigint[]) AND body IS NULL AND payload IS NULL
		   AND NOT EXISTS (SELECT 1 FROM envelope_body b WHERE b.id = envelope.id AND b.id = ANY($1::bigint[]))
		 ORDER BY id`, ids)
	if err != nil {
		return nil, fmt.Errorf("check purged envelopes: %w", err)
	}
	purged, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return nil, fmt.Errorf("check purged envelopes: %w", err)
	}
	return purged, nil
}

// InStatus returns, in id order, those of ids whose envelope is in status.
func InStatus(ctx context.Context, q pg.Querier, ids []int64, status Status) ([]int64, error) {
	rows, err := q.Query(ctx, `SELECT id FROM envelope WHERE id = ANY($1::bigint[]) AND status = $2 ORDER BY id`, ids, string(status))
	if err != nil {
		return nil, fmt.Errorf("check envelopes' status: %w", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return nil, fmt.Errorf("check envelopes' status: %w", err)
	}
	return out, nil
}

// Missing returns, in id order, those of ids that are not envelopes
// (Existing's complement).
func Missing(ctx context.Context, q pg.Querier, ids []int64) ([]int64, error) {
	exist, err := Existing(ctx, q, ids)
	if err != nil {
		return nil, err
	}
	var missing []int64
	for _, id := range ids {
		if !exist[id] {
			missing = append(missing, id)
		}
	}
	slices.Sort(missing)
	return slices.Compact(missing), nil
}

// BodyMatches returns the ids in [lower, upper) of the envelopes whose
// envelope_body payload contains every document of contains, highest
// first, read through envelope_body_payload_idx: the range must lie in
// one partition whose Chunk is BodyIndexed. It returns at most limit ids;
// complete is false when there are more (a value too common for the index
// to pay: a walk newest first finds a page of it sooner). The index is
// lossy (jsonb_path_ops hashes paths): PostgreSQL rechecks each candidate,
// so the ids are exact.
func BodyMatches(ctx context.Context, q pg.Querier, contains []json.RawMessage, lower, upper int64, limit int) (ids []int64, complete bool, err error) {
	if len(contains) == 0 {
		return nil, false, errors.New("body matches: no document to contain")
	}
	sql, args := BodyMatchesSQL(contains, lower, upper, limit+1)
	return matches(ctx, q, "search bodies", sql, args, limit)
}

// BodyMatchesSQL is the statement BodyMatches runs (up to limit ids) and
// its arguments, to run with CustomPlan: for a test of its plan.
func BodyMatchesSQL(contains []json.RawMessage, lower, upper int64, limit int) (string, []any) {
	var b sqlBuilder
	b.cond("b.id >= " + b.arg(lower))
	b.cond("b.id < " + b.arg(upper))
	for _, c := range contains {
		b.cond("b.payload @> " + b.arg(string(c)) + "::jsonb")
	}
	return `SELECT b.id FROM envelope_body b WHERE ` + b.where() + ` LIMIT ` + b.arg(limit), b.args
}

// HeaderMatches is BodyMatches for headers, read through
// envelope_headers_idx: the range must lie in one partition whose Chunk is
// HeadersIndexed. Its ids are a superset of the envelopes with those
// headers: the index is on the headers lowercased (names match in any
// case, as Selection's do), so a value that differs only in case is among
// them too; the caller checks each against its Selection.
func HeaderMatches(ctx context.Context, q pg.Querier, headers map[string]string, lower, upper int64, limit int) (ids []int64, complete bool, err error) {
	if len(headers) == 0 {
		return nil, false, errors.New("header matches: no header to match")
	}
	sql, args := HeaderMatchesSQL(headers, lower, upper, limit+1)
	return matches(ctx, q, "search headers", sql, args, limit)
}

// HeaderMatchesSQL is the statement HeaderMatches runs (up to limit ids)
// and its arguments, to run with CustomPlan: for a test of its plan.
func HeaderMatchesSQL(headers map[string]string, lower, upper int64, limit int) (string, []any) {
	doc, _ := json.Marshal(headers) // a map of strings always encodes
	var b sqlBuilder
	b.cond("e.id >= " + b.arg(lower))
	b.cond("e.id < " + b.arg(upper))
	// Both sides through the index's expression (migration 00204): lower()
	// of jsonb's own text, so that a value is compared as that text, not
	// as the JSON the caller wrote (escapes).
	b.cond(headersIndexed("e.headers") + " @> " + headersIndexed(b.arg(string(doc))+"::jsonb"))
	return `SELECT e.id FROM envelope e WHERE ` + b.where() + ` LIMIT ` + b.arg(limit), b.args
}

// headersIndexed is envelope_headers_idx's expression over the jsonb x.
func headersIndexed(x string) string {
	return "lower((" + x + ")::text)::jsonb"
}

// matches runs a lookup of up to limit+1 ids: the ids highest first and
// complete, or none and not complete when there are more than limit.
func matches(ctx context.Context, q pg.Querier, what, sql string, args []any, limit int) (ids []int64, complete bool, err error) {
	rows, err := q.Query(ctx, sql, CustomPlan(args)...)
	if err != nil {
		return nil, false, fmt.Errorf("%s: %w", what, err)
	}
	ids, err = pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return nil, false, fmt.Errorf("%s: %w", what, err)
	}
	if len(ids) > limit {
		return nil, false, nil
	}
	slices.Sort(ids)
	slices.Reverse(ids)
	return ids, true, nil
}
