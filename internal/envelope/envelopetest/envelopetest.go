// Package envelopetest makes envelope rows for tests, in any state, without
// each test writing its own INSERT: a Row names what the test cares about and
// every other column takes a valid default (a JSON body with its sha256 and
// size, received now, pending). Adding a column to the envelope table means
// adding it here once. InsertMany inserts a seed of thousands in one
// statement.
//
// InsertAttempt, InsertReplay, InsertConflict and InsertDuplicate add the
// rows that hang off an envelope (envelope_attempt, envelope_replay,
// envelope_conflict, envelope_duplicate), with the same kind of defaults.
//
// Rows inserted this way have no River job: a test that processes them
// enqueues the job itself, or goes through envelope.Store as ingest does.
package envelopetest

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/inboxhq/inbox/internal/pg"
)

// Row is one envelope to insert. Zero fields take the defaults shown.
type Row struct {
	Source     string            // "src"
	Provider   string            // "standard"
	DeliveryID string            // unique per process: "d-<n>"
	EventType  string            // "payment.succeeded"
	Status     string            // "pending"
	Body       []byte            // {"delivery":"<DeliveryID>"}; stored as payload too when it is JSON
	NoBody     bool              // body purged (NULL, body_purged_at set); payload kept unless NoPayload
	NoPayload  bool              // payload NULL even when Body is JSON (as for a provider whose body is not parsed)
	Headers    map[string]string // {}
	// ReceivedAt defaults to now; ProcessedAt, for a final Status, to
	// ReceivedAt (a final envelope must have one).
	ReceivedAt  time.Time
	ProcessedAt time.Time
	// BodyPurgedAt, with NoBody, defaults to ReceivedAt.
	BodyPurgedAt time.Time
	Attempts     int
	LastError    string // NULL when empty
	LastCause    string // NULL when empty (a labels.Cause)
	Result       json.RawMessage
}

var seq atomic.Int64

// Insert inserts r and returns its id; it fails the test on any error.
func Insert(t testing.TB, q pg.Querier, r Row) int64 {
	t.Helper()
	id, err := Create(context.Background(), q, r)
	if err != nil {
		t.Fatalf("envelopetest: %v", err)
	}
	return id
}

// Create is Insert for code without a test (an Example): it returns the
// error.
func Create(ctx context.Context, q pg.Querier, r Row) (int64, error) {
	ids, err := CreateMany(ctx, q, []Row{r})
	if err != nil {
		return 0, err
	}
	return ids[0], nil
}

// InsertMany inserts n rows, row(i) for i in [0, n), in one statement and
// returns their ids in that order; it fails the test on any error. Use it
// for seeds of hundreds or thousands of envelopes, where one INSERT each
// would be slow.
func InsertMany(t testing.TB, q pg.Querier, n int, row func(i int) Row) []int64 {
	t.Helper()
	rows := make([]Row, n)
	for i := range rows {
		rows[i] = row(i)
	}
	ids, err := CreateMany(context.Background(), q, rows)
	if err != nil {
		t.Fatalf("envelopetest: %v", err)
	}
	return ids
}

// MoveBodies lays the bodies of the envelopes whose partitions are marked
// bodies_in_rows (those InsertMany stores) out as ingest stores them since
// migration 00200: each body in envelope_body, a copy left in the row of a
// failed or resolved envelope only (as the worker keeps it), and the
// partitions no longer marked. A body search then reads them through
// envelope_body (and its index, 00203). It returns how many bodies it
// moved, and fails the test on any error.
func MoveBodies(t testing.TB, q pg.Querier) int64 {
	t.Helper()
	var moved int64
	err := q.QueryRow(context.Background(), `
		WITH p AS (
			UPDATE envelope_partition SET bodies_in_rows = false
			 WHERE dropped_at IS NULL AND bodies_in_rows AND lower_id IS NOT NULL
			RETURNING lower_id, upper_id
		), e AS (
			SELECT e.id, e.body, e.payload, e.status FROM envelope e JOIN p ON e.id >= p.lower_id AND e.id < p.upper_id
			 WHERE e.body IS NOT NULL
		), b AS (
			INSERT INTO envelope_body (id, body, payload) SELECT id, body, payload FROM e
		), u AS (
			UPDATE envelope x SET body = NULL, payload = NULL
			  FROM e WHERE x.id = e.id AND e.status NOT IN ('failed', 'resolved')
		)
		SELECT count(*) FROM e`).Scan(&moved)
	if err != nil {
		t.Fatalf("envelopetest: move bodies to envelope_body: %v", err)
	}
	return moved
}

// CreateMany is InsertMany for code without a test: it inserts rows in one
// statement and returns their ids in order, or the error.
func CreateMany(ctx context.Context, q pg.Querier, rows []Row) ([]int64, error) {
	if len(rows) == 0 {
		return []int64{}, nil
	}
	var c columns
	for _, r := range rows {
		if err := c.add(r); err != nil {
			return nil, err
		}
	}
	if err := ensurePartitions(ctx, q, c.receivedAt); err != nil {
		return nil, err
	}
	// Each row's id says when it was stored: its ReceivedAt, as ingest's
	// (both are the transaction's now() there), so a row received 100 days
	// ago lives in that day's partition. Each row takes its delivery id's
	// key, as ingest's insert does.
	var ids []int64
	err := q.QueryRow(ctx, `
		WITH r AS MATERIALIZED (
			SELECT envelope_id_at(received_at) | (nextval('envelope_id_seq') & 1048575) AS id, *
			  FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::bytea[], $7::text[], $8::text[],
			              $9::bytea[], $10::int[], $11::timestamptz[], $12::timestamptz[], $13::int[], $14::text[], $15::text[],
			              $16::timestamptz[], $17::text[])
			       WITH ORDINALITY AS r(source, provider, delivery_id, event_type, status, body, payload, headers,
			                            body_sha256, body_size, received_at, processed_at, attempts, last_error, result,
			                            body_purged_at, last_cause, ord)
		), ins AS (
			INSERT INTO envelope (id, source, provider, delivery_id, event_type, status, body, payload, headers,
			                      body_sha256, body_size, received_at, processed_at, attempts, last_error, result,
			                      body_purged_at, last_cause)
			SELECT id, source, provider, delivery_id, event_type, status, body, payload::jsonb, headers::jsonb,
			       body_sha256, body_size, received_at, processed_at, attempts, last_error, result::jsonb,
			       body_purged_at, last_cause
			  FROM r ORDER BY ord
		), keys AS (
			INSERT INTO envelope_key (delivery_id, source, envelope_id) SELECT delivery_id, source, id FROM r
		), layout AS (
			-- Bodies in the rows, as before envelope_body (00200): the
			-- row-by-row body purge goes through these partitions.
			UPDATE envelope_partition p SET bodies_in_rows = true
			 WHERE p.dropped_at IS NULL AND NOT p.bodies_in_rows
			   AND EXISTS (SELECT 1 FROM r WHERE r.id >= coalesce(p.lower_id, -9223372036854775808) AND r.id < p.upper_id)
		)
		SELECT array_agg(id ORDER BY ord) FROM r`,
		c.source, c.provider, c.deliveryID, c.eventType, c.status, c.body, c.payload, c.headers,
		c.sha256, c.size, c.receivedAt, c.processedAt, c.attempts, c.lastError, c.result,
		c.purgedAt, c.lastCause).Scan(&ids)
	if err != nil {
		if len(rows) == 1 {
			return nil, fmt.Errorf("insert envelope %s/%s: %w", c.source[0], c.deliveryID[0], err)
		}
		return nil, fmt.Errorf("insert %d envelopes: %w", len(rows), err)
	}
	return ids, nil
}

// ensurePartitions creates the day partitions (UTC) of the times that no
// live partition covers yet, as the worker keeps them for the days ahead.
func ensurePartitions(ctx context.Context, q pg.Querier, times []time.Time) error {
	days := map[time.Time]bool{}
	for _, t := range times {
		days[t.UTC().Truncate(24*time.Hour)] = true
	}
	for d := range days {
		var name string
		err := q.QueryRow(ctx, `
			SELECT CASE WHEN EXISTS (SELECT 1 FROM envelope_partition p
			                          WHERE p.dropped_at IS NULL AND coalesce(p.lower_id, -9223372036854775808) <= envelope_id_at($1)
			                            AND p.upper_id > envelope_id_at($1))
			            THEN '' ELSE envelope_partition_create($1, $1 + interval '1 day') END`, d).Scan(&name)
		if err != nil {
			return fmt.Errorf("create the envelope partition of %s: %w", d.Format(time.DateOnly), err)
		}
	}
	return nil
}

// MoveTo makes envelope id as if stored at `at`: it gives it the id a
// delivery stored then would have (in that day's partition, made if
// missing), with received_at = at, and moves its key, attempts,
// duplicates, conflicts and replay records along; it returns the new id.
// For retention tests, which need envelopes from months ago stored through
// envelope.Store. Ledger rows are append-only: an envelope with one cannot
// move. The counts (envelope_count) of its duplicates stay in the hour it
// left: their trigger finds a duplicate's source through its envelope,
// which moves in the same statement.
func MoveTo(t testing.TB, q pg.Querier, id int64, at time.Time) int64 {
	t.Helper()
	ctx := context.Background()
	if err := ensurePartitions(ctx, q, []time.Time{at}); err != nil {
		t.Fatalf("envelopetest: %v", err)
	}
	var moved int64
	err := q.QueryRow(ctx, `
		WITH n AS MATERIALIZED (SELECT envelope_id_at($2) | (nextval('envelope_id_seq') & 1048575) AS id),
		e AS (UPDATE envelope SET id = n.id, received_at = $2 FROM n WHERE envelope.id = $1 RETURNING envelope.id),
		ob AS (DELETE FROM envelope_body WHERE id = $1 RETURNING body, payload),
		nb AS (INSERT INTO envelope_body (id, body, payload) SELECT n.id, ob.body, ob.payload FROM n, ob),
		k AS (UPDATE envelope_key SET envelope_id = n.id FROM n WHERE envelope_id = $1),
		a AS (UPDATE envelope_attempt SET envelope_id = n.id FROM n WHERE envelope_id = $1),
		d AS (UPDATE envelope_duplicate SET envelope_id = n.id FROM n WHERE envelope_id = $1),
		c AS (UPDATE envelope_conflict SET envelope_id = n.id FROM n WHERE envelope_id = $1),
		r AS (UPDATE envelope_replay SET envelope_id = n.id FROM n WHERE envelope_id = $1)
		SELECT id FROM e`, id, at).Scan(&moved)
	if err != nil {
		t.Fatalf("envelopetest: move envelope %d to %s: %v", id, at, err)
	}
	return moved
}

// columns holds rows column by column, as CreateMany's unnest takes them.
type columns struct {
	source, provider, deliveryID, eventType, status []string
	body, sha256                                    [][]byte
	payload, result, lastError, lastCause           []*string
	headers                                         []string
	size, attempts                                  []int
	receivedAt                                      []time.Time
	processedAt, purgedAt                           []*time.Time
}

// add appends r, its defaults filled in.
func (c *columns) add(r Row) error {
	if r.Source == "" {
		r.Source = "src"
	}
	if r.Provider == "" {
		r.Provider = "standard"
	}
	if r.DeliveryID == "" {
		r.DeliveryID = fmt.Sprintf("d-%d", seq.Add(1))
	}
	if r.EventType == "" {
		r.EventType = "payment.succeeded"
	}
	if r.Status == "" {
		r.Status = "pending"
	}
	if r.Body == nil {
		r.Body, _ = json.Marshal(map[string]string{"delivery": r.DeliveryID})
	}
	if r.Headers == nil {
		r.Headers = map[string]string{}
	}
	if r.ReceivedAt.IsZero() {
		r.ReceivedAt = time.Now()
	}
	var processed *time.Time
	if r.Status != "pending" {
		if r.ProcessedAt.IsZero() {
			r.ProcessedAt = r.ReceivedAt
		}
		processed = &r.ProcessedAt
	}
	var payload, result *string
	if json.Valid(r.Body) && !r.NoPayload {
		s := string(r.Body)
		payload = &s
	}
	if r.Result != nil {
		s := string(r.Result)
		result = &s
	}
	headers, err := json.Marshal(r.Headers)
	if err != nil {
		return err
	}
	sum := sha256.Sum256(r.Body)
	body := r.Body
	var purgedAt *time.Time
	if r.NoBody {
		if r.BodyPurgedAt.IsZero() {
			r.BodyPurgedAt = r.ReceivedAt
		}
		body, purgedAt = nil, &r.BodyPurgedAt
	}
	c.source = append(c.source, r.Source)
	c.provider = append(c.provider, r.Provider)
	c.deliveryID = append(c.deliveryID, r.DeliveryID)
	c.eventType = append(c.eventType, r.EventType)
	c.status = append(c.status, r.Status)
	c.body = append(c.body, body)
	c.payload = append(c.payload, payload)
	c.headers = append(c.headers, string(headers))
	c.sha256 = append(c.sha256, sum[:])
	c.size = append(c.size, len(r.Body))
	c.receivedAt = append(c.receivedAt, r.ReceivedAt)
	c.processedAt = append(c.processedAt, processed)
	c.attempts = append(c.attempts, r.Attempts)
	c.lastError = append(c.lastError, nullable(r.LastError))
	c.result = append(c.result, result)
	c.purgedAt = append(c.purgedAt, purgedAt)
	c.lastCause = append(c.lastCause, nullable(r.LastCause))
	return nil
}

// nullable is s, or nil (NULL) when s is empty.
func nullable(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}
