package envelope

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inboxhq/inbox/internal/pg"
)

// The read-only questions an operator asks about envelopes beyond one
// envelope's record (admin.Show): a conflicting delivery's body, when the
// duplicates came, which causes fail and since when, which replay runs ran,
// and which envelope a River job processes. The console asks them; each is
// one statement.

// Find returns the envelopes an operator's search term names, lowest id
// first: the envelope of that id when term is a number, those of every
// source whose delivery id (the provider's event or message id: Stripe's
// evt_..., a Standard Webhooks msg_..., GitHub's delivery uuid, Shopify's
// webhook id) is term, found through envelope_key, and the Shopify
// deliveries of that event id (X-Shopify-Event-Id, which a Shopify event
// keeps across its webhooks: envelope_shopify_event_idx, probed per source
// the counters know). At most limit.
func Find(ctx context.Context, q pg.Querier, term string, limit int) ([]int64, error) {
	var byID *int64
	if n, err := strconv.ParseInt(term, 10, 64); err == nil && n > 0 {
		byID = &n
	}
	rows, err := q.Query(ctx, `
		SELECT id FROM envelope WHERE id = $1
		UNION
		SELECT e.id FROM envelope_key k JOIN envelope e ON e.id = k.envelope_id WHERE k.delivery_id = $2
		UNION
		SELECT id FROM envelope
		 WHERE provider = 'shopify' AND headers ->> 'X-Shopify-Event-Id' = $2
		   AND source = ANY (ARRAY(SELECT DISTINCT source FROM envelope_count))
		ORDER BY 1 LIMIT $3`, byID, term, limit)
	if err != nil {
		return nil, fmt.Errorf("find envelopes: %w", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return nil, fmt.Errorf("find envelopes: %w", err)
	}
	return ids, nil
}

// KeyIDs returns the ids of the envelopes whose delivery id is deliveryID,
// of any source (at most one each), lowest first: envelope_key's, one probe
// of its primary key per hash partition.
func KeyIDs(ctx context.Context, q pg.Querier, deliveryID string) ([]int64, error) {
	rows, err := q.Query(ctx, `SELECT envelope_id FROM envelope_key WHERE delivery_id = $1 ORDER BY 1`, deliveryID)
	if err != nil {
		return nil, fmt.Errorf("look up delivery id %q: %w", deliveryID, err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return nil, fmt.Errorf("look up delivery id %q: %w", deliveryID, err)
	}
	return ids, nil
}

// StoredBody returns envelope id's raw body: nil when retention dropped it,
// ErrNotFound when there is no such envelope.
func StoredBody(ctx context.Context, q pg.Querier, id int64) ([]byte, error) {
	var body []byte
	err := q.QueryRow(ctx, `
		SELECT coalesce(e.body, (SELECT b.body FROM envelope_body b WHERE b.id = $1)) FROM envelope e WHERE e.id = $1`, id).Scan(&body)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("load body of envelope %d: %w", id, err)
	}
	return body, nil
}

// ConflictBody returns the body of envelope_conflict row id, which belongs
// to envelope envelopeID: nil when retention dropped it. A row of another
// envelope, or none, is ErrNotFound.
func ConflictBody(ctx context.Context, q pg.Querier, envelopeID, id int64) ([]byte, error) {
	var body []byte
	err := q.QueryRow(ctx, `SELECT body FROM envelope_conflict WHERE id = $1 AND envelope_id = $2`, id, envelopeID).Scan(&body)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("load conflict %d: %w", id, err)
	}
	return body, nil
}

// DuplicateTimes returns when the newest limit duplicates of envelope id
// (deliveries of its id with its body) arrived, newest first.
func DuplicateTimes(ctx context.Context, q pg.Querier, id int64, limit int) ([]time.Time, error) {
	rows, err := q.Query(ctx, `
		SELECT received_at FROM envelope_duplicate WHERE envelope_id = $1
		 ORDER BY received_at DESC, id DESC LIMIT $2`, id, limit)
	if err != nil {
		return nil, fmt.Errorf("load duplicates: %w", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[time.Time])
	if err != nil {
		return nil, fmt.Errorf("load duplicates: %w", err)
	}
	return out, nil
}

// CauseCount is one failure cause: how many envelopes it failed now, the
// newest of them, and, over a window, how many attempts failed or were
// retried with it in each bucket.
type CauseCount struct {
	// Cause is "" for envelopes that failed before causes were recorded
	// (migration 00171).
	Cause string
	// Failed counts envelopes whose status is failed with this last cause.
	Failed int64
	// LatestID is the newest of them (0 when none is failed now), and
	// LatestError its last_error.
	LatestID    int64
	LatestError string
	// Attempts counts, per bucket of the window (oldest first), attempts
	// that failed or were retried with this cause; Total sums them.
	Attempts []int64
	Total    int64
}

// maxCauses bounds the causes Failures reads: far more than labels.Causes.
const maxCauses = 1000

// FailureWindow is what Failures reads: causes over [Since, Since +
// Buckets×Bucket), optionally for one source.
type FailureWindow struct {
	Since   time.Time
	Bucket  time.Duration
	Buckets int
	Source  string // "" for every source
}

// Failures groups failures by cause: the envelopes failed now, and the
// failed or retried attempts per bucket of w. Causes are ordered by failed
// envelopes, then by attempts in the window, then by name. The failed count
// reads the status index, and the attempts the partial index on failing
// attempts (migration 00176), so each costs what there is to count, not the
// size of the inbox.
func Failures(ctx context.Context, q pg.Querier, w FailureWindow) ([]CauseCount, error) {
	if w.Bucket <= 0 || w.Buckets <= 0 || w.Buckets > 1000 {
		return nil, fmt.Errorf("failures: want a positive bucket and 1 to 1000 buckets")
	}
	byCause := map[string]*CauseCount{}
	get := func(cause string) *CauseCount {
		c, ok := byCause[cause]
		if !ok {
			c = &CauseCount{Cause: cause, Attempts: make([]int64, w.Buckets)}
			byCause[cause] = c
		}
		return c
	}
	failed, err := FailureCauses(ctx, q, w.Source, maxCauses)
	if err != nil {
		return nil, err
	}
	for _, f := range failed {
		c := get(f.Cause)
		c.Failed, c.LatestID, c.LatestError = f.Count, f.LatestID, f.LatestError
	}
	rows, err := q.Query(ctx, `
		SELECT coalesce(a.cause, ''),
		       floor(extract(epoch FROM a.finished_at - $1::timestamptz) / $2::float8)::int AS bucket,
		       count(*)
		  FROM envelope_attempt a
		 WHERE a.outcome IN ('failed', 'retry')
		   AND a.finished_at >= $1::timestamptz
		   AND a.finished_at < $1::timestamptz + make_interval(secs => $2::float8 * $3)
		   AND ($4 = '' OR EXISTS (SELECT 1 FROM envelope e WHERE e.id = a.envelope_id AND e.source = $4))
		 GROUP BY 1, 2`, w.Since, w.Bucket.Seconds(), w.Buckets, w.Source)
	if err != nil {
		return nil, fmt.Errorf("count failed attempts by cause: %w", err)
	}
	var cause string
	var bucket int
	var n int64
	if _, err := pgx.ForEachRow(rows, []any{&cause, &bucket, &n}, func() error {
		if bucket >= 0 && bucket < w.Buckets {
			c := get(cause)
			c.Attempts[bucket] += n
			c.Total += n
		}
		return nil
	}); err != nil {
		return nil, fmt.Errorf("count failed attempts by cause: %w", err)
	}
	out := make([]CauseCount, 0, len(byCause))
	for _, c := range byCause {
		out = append(out, *c)
	}
	slices.SortFunc(out, func(a, b CauseCount) int {
		return cmp.Or(cmp.Compare(b.Failed, a.Failed), cmp.Compare(b.Total, a.Total), cmp.Compare(a.Cause, b.Cause))
	})
	return out, nil
}

// ReplayRun is one replay run: the envelope_replay rows of one batch id (a
// row without one, from before batch ids, is a run of its own).
type ReplayRun struct {
	BatchID   string // "" for a row without one
	Actor     string
	Reason    string
	Envelopes int64
	First     time.Time
	Last      time.Time
	// FirstEnvelopeID is the lowest envelope id the run replayed.
	FirstEnvelopeID int64
	// Filter is the selection the run replayed, as recorded
	// (envelope_replay.filter: the filter's fields, relative times as the
	// instants they meant).
	Filter json.RawMessage
}

// recentReplayRows is how far back RecentReplayRuns looks for runs: the
// runs among the newest this many envelope_replay rows (each of them then
// counted whole, however large).
const recentReplayRows = 10000

// RecentReplayRuns returns the newest limit replay runs, newest first: the
// runs among the newest recentReplayRows envelope_replay rows, each summed
// over all its rows (a run of 100,000 envelopes counts them all).
func RecentReplayRuns(ctx context.Context, q pg.Querier, limit int) ([]ReplayRun, error) {
	rows, err := q.Query(ctx, `
		WITH recent AS (
			SELECT DISTINCT ON (coalesce(batch_id::text, 'row ' || id)) batch_id, id
			  FROM (SELECT id, batch_id, replayed_at FROM envelope_replay ORDER BY replayed_at DESC, id DESC LIMIT $2) r
			 ORDER BY coalesce(batch_id::text, 'row ' || id)
		)
		SELECT coalesce(r.batch_id::text, ''), g.actor, g.reason, g.n, g.first, g.last, g.first_envelope, g.filter
		  FROM recent r
		 CROSS JOIN LATERAL (
			SELECT min(x.actor) AS actor, min(x.reason) AS reason, count(*) AS n, min(x.replayed_at) AS first,
			       max(x.replayed_at) AS last, min(x.envelope_id) AS first_envelope, (array_agg(x.filter))[1] AS filter
			  FROM envelope_replay x
			 WHERE (r.batch_id IS NOT NULL AND x.batch_id = r.batch_id) OR (r.batch_id IS NULL AND x.id = r.id)
		 ) g
		 ORDER BY g.last DESC
		 LIMIT $1`, limit, recentReplayRows)
	if err != nil {
		return nil, fmt.Errorf("list replay runs: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (ReplayRun, error) {
		var x ReplayRun
		err := r.Scan(&x.BatchID, &x.Actor, &x.Reason, &x.Envelopes, &x.First, &x.Last, &x.FirstEnvelopeID, &x.Filter)
		return x, err
	})
	if err != nil {
		return nil, fmt.Errorf("list replay runs: %w", err)
	}
	return out, nil
}

// StatusCount is how many envelopes have one status and last cause.
type StatusCount struct {
	Status Status
	Cause  string // "" for none
	N      int64
}

// ReplayOutcome counts the envelopes of replay run batchID by their status
// now and last cause, most first: what became of a replay.
func ReplayOutcome(ctx context.Context, q pg.Querier, batchID string) ([]StatusCount, error) {
	rows, err := q.Query(ctx, `
		SELECT e.status, coalesce(e.last_cause, ''), count(*)
		  FROM envelope e
		 WHERE e.id IN (SELECT envelope_id FROM envelope_replay WHERE batch_id = $1::uuid)
		 GROUP BY 1, 2
		 ORDER BY 3 DESC, 1, 2`, batchID)
	if err != nil {
		return nil, fmt.Errorf("count a replay's outcome: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (StatusCount, error) {
		var x StatusCount
		err := r.Scan(&x.Status, &x.Cause, &x.N)
		return x, err
	})
	if err != nil {
		return nil, fmt.Errorf("count a replay's outcome: %w", err)
	}
	return out, nil
}

// OfJob returns the envelope River job id processes: ErrNotFound when there
// is no such job, or it is not a process_envelope job.
func OfJob(ctx context.Context, q pg.Querier, jobID int64) (int64, error) {
	var id int64
	err := q.QueryRow(ctx, `SELECT (args->>'envelope_id')::bigint FROM river_job WHERE id = $1 AND kind = $2`,
		jobID, ProcessArgs{}.Kind()).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, ErrNotFound
	}
	if err != nil {
		return 0, fmt.Errorf("find job %d: %w", jobID, err)
	}
	return id, nil
}
