package envelope

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inboxhq/inbox/internal/pg"
)

// Clock is what a selection's time bounds resolve against: the database's
// now, and where the legacy partition ends.
type Clock struct {
	Now time.Time
	// LegacyUntil is the legacy partition's upper_at while it is kept (zero
	// when there is none): envelopes stored before the partitioned layout
	// have ids that do not follow their received_at, so a window that
	// starts before LegacyUntil cannot bound ids from below.
	LegacyUntil time.Time
}

// ReadClock reads the database's now() and the legacy partition's end in
// one statement.
func ReadClock(ctx context.Context, q pg.Querier) (Clock, error) {
	var c Clock
	var legacy *time.Time
	if err := q.QueryRow(ctx, `SELECT now(), (SELECT upper_at FROM envelope_partition WHERE name = 'legacy' AND dropped_at IS NULL)`).Scan(&c.Now, &legacy); err != nil {
		return Clock{}, fmt.Errorf("read clock: %w", err)
	}
	if legacy != nil {
		c.LegacyUntil = *legacy
	}
	return c, nil
}

// IDBefore is the smallest id above every id of an envelope received
// before t: ids carry their envelope's second of received_at (IDAt), so
// one received at 12:00:00.5 has an id below IDBefore(12:00:00.7) but not
// below IDAt(12:00:00.7). The zero time gives the largest id.
func IDBefore(t time.Time) int64 {
	if t.IsZero() {
		return math.MaxInt64
	}
	id := IDAt(t)
	if !t.Equal(t.Truncate(time.Second)) {
		id += 1 << 20
	}
	return id
}

// A Chunk is the part of a time window that one statement of a bounded
// search reads: ids [LowerID, UpperID) of one partition.
type Chunk struct {
	Partition string
	// From and To is the part of the window the chunk covers.
	From, To         time.Time
	LowerID, UpperID int64
	// Envelopes is an estimate: the partition's envelope count (from
	// envelope_count, not a scan) times the chunk's share of the
	// partition's time.
	Envelopes int64
	// BodyIndexed says every body of the partition is in envelope_body and
	// that partition has its GIN index on payload (migration 00203,
	// envelope_body_payload_idx): a body containment can read it by index
	// (BodyMatches). A partition whose bodies are stored in their rows
	// (bodies_in_rows), were dropped (its envelope_body partition is gone;
	// failed ones keep copies in their rows), or that predates the index
	// on a large inbox, is not.
	BodyIndexed bool
	// HeadersIndexed says the partition has its GIN index on the headers
	// (migration 00204, envelope_headers_idx): a header search can read it
	// by index (HeaderMatches). Headers stay in the row whatever the body
	// retention, so only a partition that predates the index on a large
	// inbox is not.
	HeadersIndexed bool
}

// PlanScan splits the window [since, until) into chunks of about
// chunkRows envelopes at most, newest first, one partition or less each.
// It reads the partition registry and the counters: O(partitions), whatever
// the partitions hold. The legacy partition, whose ids do not follow time,
// is one chunk however large.
func PlanScan(ctx context.Context, q pg.Querier, since, until time.Time, chunkRows int64) ([]Chunk, error) {
	if chunkRows <= 0 {
		return nil, fmt.Errorf("chunk of %d envelopes: must be positive", chunkRows)
	}
	// What a partition holds is spread over the seconds between its first
	// and last envelope (two probes of its primary key), not over its
	// width: today's partition is filled up to now only. envelope_span
	// plans each partition's probe by itself (migration 00202): a LATERAL
	// min/max over envelope was planned over every partition kept.
	rows, err := q.Query(ctx, `
		SELECT p.name, p.lower_at, p.upper_at, p.upper_id, envelope_id_time(m.lo), envelope_id_time(m.hi),
		       coalesce((SELECT sum(c.n) FROM envelope_count c
		                  WHERE c.kind IN ('pending', 'done', 'failed', 'ignored', 'resolved')
		                    AND c.bucket <@ envelope_count_range(p.lower_id, p.upper_id)), 0)::bigint,
		       NOT p.bodies_in_rows AND `+hasPartitionIndex("envelope_body_payload_idx", "envelope_body_")+`,
		       `+hasPartitionIndex("envelope_headers_idx", "envelope_")+`
		  FROM envelope_partition p
		  LEFT JOIN LATERAL envelope_span(p.lower_id, p.upper_id) m ON p.lower_id IS NOT NULL
		 WHERE p.dropped_at IS NULL
		   AND ($1::timestamptz IS NULL OR p.upper_at > $1)
		   AND ($2::timestamptz IS NULL OR p.lower_at IS NULL OR p.lower_at < $2)
		 ORDER BY p.upper_id DESC`, nullTime(since), nullTime(until))
	if err != nil {
		return nil, fmt.Errorf("plan the scan: %w", err)
	}
	type part struct {
		name        string
		lo          *time.Time
		hi          time.Time
		hiID        int64
		first, last *time.Time
		n           int64
		indexed     bool
		headers     bool
	}
	var parts []part
	var p part
	if _, err := pgx.ForEachRow(rows, []any{&p.name, &p.lo, &p.hi, &p.hiID, &p.first, &p.last, &p.n, &p.indexed, &p.headers}, func() error {
		parts = append(parts, p)
		return nil
	}); err != nil {
		return nil, fmt.Errorf("plan the scan: %w", err)
	}
	var out []Chunk
	for _, p := range parts {
		from, to := since, p.hi
		if !until.IsZero() && until.Before(to) {
			to = until
		}
		if p.name == "legacy" || p.lo == nil {
			if p.lo != nil && p.lo.After(from) {
				from = *p.lo
			}
			out = append(out, Chunk{Partition: p.name, From: from, To: to, LowerID: math.MinInt64, UpperID: p.hiID, Envelopes: p.n, BodyIndexed: p.indexed, HeadersIndexed: p.headers})
			continue
		}
		if p.lo.After(from) {
			from = *p.lo
		}
		// The seconds its envelopes span (ids have a second's grain).
		filled := [2]time.Time{*p.lo, p.hi}
		if p.first != nil {
			filled = [2]time.Time{*p.first, p.last.Add(time.Second)}
		}
		share := func(lo, hi time.Time) int64 {
			lo, hi = later(lo, filled[0]), earlier(hi, filled[1])
			if !hi.After(lo) {
				return 0
			}
			return int64(math.Ceil(float64(p.n) * float64(hi.Sub(lo)) / float64(filled[1].Sub(filled[0]))))
		}
		pieces := max(1, int((share(from, to)+chunkRows-1)/chunkRows))
		// Whole seconds: ids have no finer grain, so a piece boundary
		// inside a second would read that second twice or not at all.
		step := max(time.Second, (to.Sub(from) / time.Duration(pieces)).Truncate(time.Second))
		for hi := to; hi.After(from); {
			lo := hi.Add(-step).Truncate(time.Second)
			if lo.Sub(from) < step/2 {
				lo = from // the last piece takes the rest rather than leave a sliver
			}
			out = append(out, Chunk{Partition: p.name, From: lo, To: hi, LowerID: IDAt(lo), UpperID: IDBefore(hi), Envelopes: share(lo, hi), BodyIndexed: p.indexed, HeadersIndexed: p.headers})
			hi = lo
		}
	}
	return out, nil
}

// hasPartitionIndex is a condition on envelope_partition p: the partition
// of p named prefix || p.name has a valid index attached to the
// partitioned index parent.
func hasPartitionIndex(parent, prefix string) string {
	return `EXISTS (SELECT 1 FROM pg_inherits i JOIN pg_index x ON x.indexrelid = i.inhrelid
	                 WHERE i.inhparent = to_regclass('` + parent + `')
	                   AND x.indrelid = to_regclass('` + prefix + `' || p.name) AND x.indisvalid)`
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func earlier(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// nullTime passes t, or NULL when it is zero.
func nullTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}
