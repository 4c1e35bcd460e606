package envelope

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/inboxhq/inbox/internal/groupcommit"
	"github.com/inboxhq/inbox/internal/pg"
)

// Store is the envelope table's PostgreSQL store.
type Store struct {
	pool    *pgxpool.Pool
	river   *river.Client[pgx.Tx]
	inserts *groupcommit.Committer[prepared, InsertResult]
}

// StoreOptions tune how Insert groups deliveries into transactions. Zero
// values take the defaults.
type StoreOptions struct {
	// MaxBatch is the most deliveries one transaction stores (default 64).
	MaxBatch int
	// MaxConcurrent is how many insert transactions may be in flight at
	// once, each on its own pool connection (default 2: on 2 cores, 2
	// stored 1.2-1.3x more deliveries/s than 4 or 8; docs/benchmarks.md).
	MaxConcurrent int
}

// NewStore returns a Store with the default StoreOptions. client may be an
// insert-only River client (one with no queues); it is used to enqueue
// processing jobs.
func NewStore(pool *pgxpool.Pool, client *river.Client[pgx.Tx]) *Store {
	return NewStoreWith(pool, client, StoreOptions{})
}

// NewStoreWith returns a Store with opts.
func NewStoreWith(pool *pgxpool.Pool, client *river.Client[pgx.Tx], opts StoreOptions) *Store {
	s := &Store{pool: pool, river: client}
	s.inserts = groupcommit.New(s.insertBatch, groupcommit.Options{
		MaxBatch:      opts.MaxBatch,
		MaxConcurrent: cmp.Or(opts.MaxConcurrent, 2),
		Timeout:       10 * time.Second,
	})
	return s
}

// Pool returns the store's pool.
func (s *Store) Pool() *pgxpool.Pool { return s.pool }

// InsertStats returns how many insert transactions committed (or failed)
// and how many deliveries they held.
func (s *Store) InsertStats() (transactions, deliveries int64) { return s.inserts.Stats() }

// Queued returns how many Insert calls wait for a transaction (those in
// the transactions in flight not included): what the next batches will
// hold.
func (s *Store) Queued() int { return s.inserts.Queued() }

// QueueAge returns how long the oldest Insert not yet answered has waited
// (zero when none waits): a few commit times while the database keeps up,
// growing while it is stalled or offered more than it can commit.
func (s *Store) QueueAge() time.Duration { return s.inserts.Age() }

// NewDelivery is a verified delivery to store.
type NewDelivery struct {
	Source     string
	Provider   string
	DeliveryID string
	EventType  string
	Body       []byte
	Payload    json.RawMessage
	Headers    map[string]string
	SignedAt   time.Time
	// MaxAttempts is River's limit for the processing job (ProcessJob): the
	// source's max_attempts; 0 keeps River's default.
	MaxAttempts int
	// TraceContext is the W3C traceparent of the request that brought the
	// delivery ("" when tracing is off: stored as NULL); every processing
	// attempt of the envelope joins that trace.
	TraceContext string
	// Origin is where the delivery came from: OriginWebhook (also when
	// empty) or OriginBackfill, with BackfillRunID the backfill_run that
	// stored it.
	Origin        Origin
	BackfillRunID int64
	// ReplayDigest, when set (provider.Delivery.ReplayDigest: the signature
	// does not cover the delivery id), is claimed for ReplayWindow in
	// envelope_digest: a later delivery with the same digest under another
	// delivery id within that window is a replay of this one, stored as
	// nothing new (InsertResult.ReplayOf).
	ReplayDigest []byte
	ReplayWindow time.Duration
}

// Origin says how an envelope reached the inbox.
type Origin string

// Envelope origins (envelope.origin).
const (
	// OriginWebhook: delivered to ingest by the provider.
	OriginWebhook Origin = "webhook"
	// OriginBackfill: listed from the provider's API by a backfill run
	// because it was never delivered.
	OriginBackfill Origin = "backfill"
)

// Stored returns, of ids, the delivery ids source already has an envelope
// for (a deleted tombstone no longer counts). It takes no lock: a delivery
// stored meanwhile is found by Insert, which answers Duplicate.
func (s *Store) Stored(ctx context.Context, source string, ids []string) (map[string]bool, error) {
	rows, err := s.pool.Query(ctx, `
		SELECT k.delivery_id
		  FROM envelope_key k
		 WHERE k.source = $1 AND k.delivery_id = ANY($2::text[])
		   AND k.envelope_id >= (SELECT envelope_id_floor())`, source, ids)
	if err != nil {
		return nil, fmt.Errorf("look up stored deliveries: %w", err)
	}
	got, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("look up stored deliveries: %w", err)
	}
	out := make(map[string]bool, len(got))
	for _, id := range got {
		out[id] = true
	}
	return out, nil
}

// InsertResult says what Insert did.
type InsertResult struct {
	EnvelopeID int64
	// Duplicate is true when the delivery id was already stored with the same
	// body, or the delivery is a replay (ReplayOf): nothing new was stored or
	// enqueued.
	Duplicate bool
	// ReplayOf, when set, is the delivery id whose signed body (and event
	// type) this delivery resent under a new id within the source's replay
	// window; EnvelopeID is that delivery's envelope. The replay is recorded
	// in envelope_duplicate (replayed_as).
	ReplayOf string
}

// ConflictError is returned by Insert when the delivery id is already stored
// with a different body. The stored envelope is untouched; the conflicting
// delivery is recorded in envelope_conflict (see Kept).
type ConflictError struct {
	EnvelopeID int64
	ConflictID int64
	// Kept says how: its body stored on a row of its own (ConflictStored),
	// counted on the row of the same variant recorded before
	// (ConflictRepeat), or counted on the envelope's overflow row without
	// its body, past MaxConflictVariants (ConflictOverflow).
	Kept ConflictKept
}

// ConflictKept is how a conflicting delivery was recorded.
type ConflictKept string

// How conflicts are kept.
const (
	ConflictStored   ConflictKept = "stored"
	ConflictRepeat   ConflictKept = "repeat"
	ConflictOverflow ConflictKept = "overflow"
)

// MaxConflictVariants is how many distinct conflicting bodies one envelope
// keeps; later variants are counted without their bodies, so what one
// captured signed body can make the inbox store is bounded.
const MaxConflictVariants = 20

// recordConflict records it as a conflict of envelope envelopeID, under the
// envelope's advisory lock (two resends of one variant at once make one
// row): a variant already recorded counts on its row, a new one gets a row
// while the envelope has fewer than MaxConflictVariants, and any later one
// counts on the overflow row, without its body.
func recordConflict(ctx context.Context, tx pgx.Tx, it prepared, envelopeID int64) (*ConflictError, error) {
	c := &ConflictError{EnvelopeID: envelopeID}
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended('envelope_conflict', $1))`, envelopeID); err != nil {
		return nil, fmt.Errorf("record conflict: %w", err)
	}
	err := tx.QueryRow(ctx, `
		UPDATE envelope_conflict SET repeats = repeats + 1, last_received_at = now()
		 WHERE envelope_id = $1 AND body_sha256 = $2 AND NOT overflow
		RETURNING id`, envelopeID, it.sum).Scan(&c.ConflictID)
	if err == nil {
		c.Kept = ConflictRepeat
		return c, nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("record conflict: %w", err)
	}
	var variants int
	if err := tx.QueryRow(ctx, `SELECT count(*) FROM envelope_conflict WHERE envelope_id = $1 AND NOT overflow`, envelopeID).Scan(&variants); err != nil {
		return nil, fmt.Errorf("record conflict: %w", err)
	}
	if variants < MaxConflictVariants {
		c.Kept = ConflictStored
		err = tx.QueryRow(ctx, `
			INSERT INTO envelope_conflict (envelope_id, source, delivery_id, body_sha256, body_size, body, headers)
			VALUES ($1, $2, $3, $4, $5, $6, $7)
			RETURNING id`, envelopeID, it.d.Source, it.d.DeliveryID, it.sum, len(it.d.Body), it.d.Body, it.headers,
		).Scan(&c.ConflictID)
	} else {
		c.Kept = ConflictOverflow
		err = tx.QueryRow(ctx, `
			UPDATE envelope_conflict SET repeats = repeats + 1, last_received_at = now(), body_sha256 = $2, body_size = $3, headers = $4
			 WHERE envelope_id = $1 AND overflow
			RETURNING id`, envelopeID, it.sum, len(it.d.Body), it.headers).Scan(&c.ConflictID)
		if errors.Is(err, pgx.ErrNoRows) {
			err = tx.QueryRow(ctx, `
				INSERT INTO envelope_conflict (envelope_id, source, delivery_id, body_sha256, body_size, body, headers, overflow)
				VALUES ($1, $2, $3, $4, $5, NULL, $6, true)
				RETURNING id`, envelopeID, it.d.Source, it.d.DeliveryID, it.sum, len(it.d.Body), it.headers,
			).Scan(&c.ConflictID)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("record conflict: %w", err)
	}
	return c, nil
}

func (e *ConflictError) Error() string {
	return fmt.Sprintf("delivery id already stored as envelope %d with a different body (conflict %d recorded)", e.EnvelopeID, e.ConflictID)
}

// prepared is a delivery with what its rows need computed.
type prepared struct {
	d        NewDelivery
	sum      []byte
	headers  []byte
	signedAt *time.Time
	payload  []byte
}

// Insert stores d as a new envelope and enqueues its processing job in the
// same transaction, and returns only after COMMIT. A delivery id already
// stored with the same body records a duplicate (a row in
// envelope_duplicate; it never waits for a worker processing the envelope)
// and enqueues nothing; with a different body it records a conflict and
// returns *ConflictError, unless either copy is a backfilled one
// (OriginBackfill: the provider's API rendering of the same event), which is
// a duplicate whatever its bytes. Safe to call concurrently with the same delivery:
// exactly one call inserts.
//
// Concurrent calls share transactions (group commit, see package
// groupcommit): a call that arrives while another commit is in flight is
// stored by the next one, with every other call waiting then. Each call
// still gets its own answer, and an error answers only the calls of the
// transaction that failed: a transaction that fails for one delivery's
// sake (a row the database refuses) is retried one delivery per
// transaction, so that delivery alone gets the error. When ctx ends before
// its transaction began, the delivery is not stored.
func (s *Store) Insert(ctx context.Context, d NewDelivery) (InsertResult, error) {
	headers, err := json.Marshal(d.Headers)
	if err != nil {
		return InsertResult{}, fmt.Errorf("encode headers: %w", err)
	}
	sum := sha256.Sum256(d.Body)
	p := prepared{d: d, sum: sum[:], headers: headers, payload: jsonbPayload(d.Payload)} // nil payload when jsonb cannot hold it: the raw body is the record
	if !d.SignedAt.IsZero() {
		p.signedAt = &d.SignedAt
	}
	return s.inserts.Do(ctx, p)
}

// errVanished means the stored delivery a conflict pointed at was deleted
// (retention) before it could be read: the insert is tried again.
var errVanished = errors.New("stored delivery vanished")

// insertBatch stores items in one transaction; when that fails on a
// statement the server refused, it stores each item in a transaction of
// its own, so a bad row fails alone.
func (s *Store) insertBatch(ctx context.Context, items []prepared) []groupcommit.Result[InsertResult] {
	out, err := s.insertTx(ctx, items)
	if err == nil {
		return out
	}
	out = make([]groupcommit.Result[InsertResult], len(items))
	var pgErr *pgconn.PgError
	if len(items) > 1 && ctx.Err() == nil && (errors.As(err, &pgErr) || errors.Is(err, errVanished)) {
		for i := range items {
			one, err := s.insertTx(ctx, items[i:i+1])
			if err != nil {
				out[i] = groupcommit.Result[InsertResult]{Err: err}
				continue
			}
			out[i] = one[0]
		}
		return out
	}
	for i := range out {
		out[i] = groupcommit.Result[InsertResult]{Err: err}
	}
	return out
}

type deliveryKey struct{ source, id string }

// insertTx stores items in one transaction: one multi-row envelope insert,
// one lookup of the delivery ids already taken, one insert of the
// duplicates, the conflicts one by one (rare), and one River InsertManyTx
// for the new envelopes' jobs. Rows are written in (source, delivery id)
// order so two concurrent transactions cannot deadlock on the unique index.
func (s *Store) insertTx(ctx context.Context, items []prepared) ([]groupcommit.Result[InsertResult], error) {
	out := make([]groupcommit.Result[InsertResult], len(items))
	order := make([]int, len(items))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int {
		return cmp.Or(cmp.Compare(items[a].d.Source, items[b].d.Source), cmp.Compare(items[a].d.DeliveryID, items[b].d.DeliveryID))
	})
	// All within ctx's deadline, the COMMIT included: past it the callers
	// are answered 503 whether or not the COMMIT then succeeds (the brief's
	// store deadline; a retry of a delivery that did commit is answered 200
	// duplicate). A transaction cut at its deadline is rolled back by the
	// server when pgx closes the connection, so no caller waits for that.
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var fresh, dups []int
		var conflicts []int
		todo, replayOf, err := claimDigests(ctx, tx, items, order)
		if err != nil {
			return err
		}
		store := func(todo []int) error {
			for round := 0; len(todo) > 0; round++ {
				if round == 3 {
					return errVanished
				}
				inserted, err := insertEnvelopes(ctx, tx, items, todo)
				if err != nil {
					return err
				}
				var taken []int
				for _, i := range todo {
					k := deliveryKey{items[i].d.Source, items[i].d.DeliveryID}
					if id, ok := inserted[k]; ok {
						delete(inserted, k) // a second copy in this batch is a duplicate of the first
						out[i].Value.EnvelopeID = id
						fresh = append(fresh, i)
						continue
					}
					taken = append(taken, i)
				}
				if len(taken) == 0 {
					break
				}
				stored, err := lookupStored(ctx, tx, items, taken)
				if err != nil {
					return err
				}
				todo = todo[:0:0]
				for _, i := range taken {
					st, ok := stored[deliveryKey{items[i].d.Source, items[i].d.DeliveryID}]
					if !ok {
						// Deleted by retention between the two statements: insert again.
						todo = append(todo, i)
						continue
					}
					out[i].Value.EnvelopeID = st.id
					if sameEvent(st, items[i].sum, items[i].d.Origin) {
						out[i].Value.Duplicate = true
						dups = append(dups, i)
					} else {
						conflicts = append(conflicts, i)
					}
				}
			}
			return nil
		}
		if err := store(todo); err != nil {
			return err
		}
		// Replays point at the envelope of the delivery whose body they
		// resent (stored before, or just now in this transaction). When that
		// envelope is gone (retention outran the window) or holds another
		// body (its delivery id was a conflicting variant's), there is
		// nothing to be a replay of: the batch's first such copy of each
		// digest takes the digest over and is stored, its other copies are
		// its replays.
		for round := 0; len(replayOf) > 0; round++ {
			if round == 2 {
				return errVanished
			}
			var srcs, ofs []string
			for i, of := range replayOf {
				srcs, ofs = append(srcs, items[i].d.Source), append(ofs, of)
			}
			originals, err := lookupStoredKeys(ctx, tx, srcs, ofs)
			if err != nil {
				return err
			}
			var late []int
			for i, of := range replayOf {
				st, ok := originals[deliveryKey{items[i].d.Source, of}]
				if !ok || !bytes.Equal(st.sum, items[i].sum) {
					late = append(late, i)
					continue
				}
				out[i].Value = InsertResult{EnvelopeID: st.id, Duplicate: true, ReplayOf: of}
				dups = append(dups, i)
				delete(replayOf, i)
			}
			if len(late) == 0 {
				break
			}
			slices.SortFunc(late, func(a, b int) int {
				return cmp.Or(cmp.Compare(items[a].d.Source, items[b].d.Source), cmp.Compare(items[a].d.DeliveryID, items[b].d.DeliveryID))
			})
			owners := map[digestKey]string{}
			var own []int
			for _, i := range late {
				d := items[i].d
				k := digestKey{d.Source, string(d.ReplayDigest)}
				if o, ok := owners[k]; ok {
					if o != d.DeliveryID {
						replayOf[i] = o // resolved against the new owner next round
					} else {
						delete(replayOf, i)
						own = append(own, i)
					}
					continue
				}
				owners[k] = d.DeliveryID
				delete(replayOf, i)
				own = append(own, i)
				if _, err := tx.Exec(ctx, `UPDATE envelope_digest SET delivery_id = $3, expires_at = now() + $4 * interval '1 microsecond'
					WHERE source = $1 AND digest = $2`, d.Source, d.ReplayDigest, d.DeliveryID, d.ReplayWindow.Microseconds()); err != nil {
					return fmt.Errorf("reclaim replay digest: %w", err)
				}
			}
			if err := store(own); err != nil {
				return err
			}
		}
		if len(dups) > 0 {
			ids := make([]int64, len(dups))
			as := make([]*string, len(dups))
			for n, i := range dups {
				ids[n] = out[i].Value.EnvelopeID
				if out[i].Value.ReplayOf != "" {
					as[n] = &items[i].d.DeliveryID
				}
			}
			if _, err := tx.Exec(ctx, `INSERT INTO envelope_duplicate (envelope_id, replayed_as) SELECT * FROM unnest($1::bigint[], $2::text[])`, ids, as); err != nil {
				return fmt.Errorf("record duplicates: %w", err)
			}
		}
		for _, i := range conflicts {
			// Different body: record the conflict, leave the original alone.
			conflict, err := recordConflict(ctx, tx, items[i], out[i].Value.EnvelopeID)
			if err != nil {
				return err
			}
			out[i].Err = conflict
		}
		if len(fresh) > 0 {
			params := make([]river.InsertManyParams, len(fresh))
			for n, i := range fresh {
				params[n] = ProcessJob(out[i].Value.EnvelopeID, items[i].d.Source, items[i].d.MaxAttempts)
			}
			if _, err := s.river.InsertManyTx(ctx, tx, params); err != nil {
				return fmt.Errorf("enqueue %d envelopes: %w", len(fresh), err)
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	for i := range out {
		if c, ok := out[i].Err.(*ConflictError); ok {
			out[i].Value = InsertResult{EnvelopeID: c.EnvelopeID}
		}
	}
	return out, nil
}

// insertEnvelopes inserts the items at idx (in that order) and returns the
// ids of the rows it inserted; a delivery id already taken inserts nothing
// (ON CONFLICT waits for a concurrent inserter to commit or roll back).
func insertEnvelopes(ctx context.Context, tx pgx.Tx, items []prepared, idx []int) (map[deliveryKey]int64, error) {
	n := len(idx)
	var (
		sources, providers, ids, types  = make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		bodies, payloads, headers, sums = make([][]byte, n), make([][]byte, n), make([][]byte, n), make([][]byte, n)
		sizes                           = make([]int32, n)
		signed                          = make([]*time.Time, n)
		traces                          = make([]string, n)
		origins                         = make([]string, n)
		runs                            = make([]*int64, n)
	)
	for j, i := range idx {
		it := items[i]
		sources[j], providers[j], ids[j], types[j] = it.d.Source, it.d.Provider, it.d.DeliveryID, it.d.EventType
		bodies[j], payloads[j], headers[j], sums[j] = it.d.Body, it.payload, it.headers, it.sum
		if bodies[j] == nil {
			bodies[j] = []byte{} // an empty body is stored as empty, not as purged
		}
		sizes[j], signed[j], traces[j] = int32(len(it.d.Body)), it.signedAt, it.d.TraceContext
		origins[j] = string(cmp.Or(it.d.Origin, OriginWebhook))
		if it.d.BackfillRunID != 0 {
			runs[j] = &it.d.BackfillRunID
		}
	}
	// The key first: ON CONFLICT on envelope_key's unique index waits for a
	// concurrent inserter of the same delivery id (DO NOTHING: a taken key is
	// left unlocked, so duplicates do not queue on it), and takeover takes
	// a key whose envelope is gone: its id is below every live partition's
	// (its partition was dropped, past the tombstone window). Both test the
	// key row, never the envelope, which a statement's snapshot may not show
	// when a concurrent inserter just committed it. A second copy in the
	// batch is left to the lookup (DISTINCT ON). Keys are written in
	// (source, delivery id) order, as the items are, so two batches cannot
	// deadlock.
	rows, err := tx.Query(ctx, `
		WITH d AS (
			SELECT *
			  FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::bytea[], $6::jsonb[], $7::jsonb[], $8::bytea[], $9::int[], $10::timestamptz[], $11::text[], $12::bigint[], $13::text[])
			       WITH ORDINALITY AS d(source, provider, delivery_id, event_type, body, payload, headers, body_sha256, body_size, signed_at, origin, backfill_run_id, trace_context, ord)
		), first AS (
			SELECT DISTINCT ON (source, delivery_id) * FROM d ORDER BY source, delivery_id, ord
		), takeover AS (
			UPDATE envelope_key k SET envelope_id = envelope_next_id()
			  FROM first f
			 WHERE k.delivery_id = f.delivery_id AND k.source = f.source
			   AND k.envelope_id < (SELECT envelope_id_floor())
			RETURNING k.delivery_id, k.source, k.envelope_id
		), fresh AS (
			INSERT INTO envelope_key (delivery_id, source, envelope_id)
			SELECT delivery_id, source, envelope_next_id() FROM first ORDER BY source, delivery_id
			ON CONFLICT (delivery_id, source) DO NOTHING
			RETURNING delivery_id, source, envelope_id
		), k AS (
			SELECT * FROM fresh UNION ALL SELECT * FROM takeover
		), e AS (
			INSERT INTO envelope (id, source, provider, delivery_id, event_type, headers, body_sha256, body_size, signed_at, origin, backfill_run_id, trace_context)
			SELECT k.envelope_id, f.source, f.provider, f.delivery_id, f.event_type, f.headers, f.body_sha256, f.body_size, f.signed_at, f.origin, f.backfill_run_id, nullif(f.trace_context, '')
			  FROM k JOIN first f ON f.source = k.source AND f.delivery_id = k.delivery_id
			 ORDER BY f.ord
			RETURNING id, source, delivery_id
		), b AS (
			-- The body in its own table (00200): retention drops it a
			-- partition at a time, and the row the worker updates stays small.
			INSERT INTO envelope_body (id, body, payload)
			SELECT k.envelope_id, f.body, f.payload
			  FROM k JOIN first f ON f.source = k.source AND f.delivery_id = k.delivery_id
		)
		SELECT id, source, delivery_id FROM e`,
		sources, providers, ids, types, bodies, payloads, headers, sums, sizes, signed, origins, runs, traces)
	if err != nil {
		return nil, fmt.Errorf("insert envelopes: %w", err)
	}
	inserted := make(map[deliveryKey]int64, n)
	var k deliveryKey
	var id int64
	_, err = pgx.ForEachRow(rows, []any{&id, &k.source, &k.id}, func() error {
		inserted[k] = id
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("insert envelopes: %w", err)
	}
	return inserted, nil
}

type storedDelivery struct {
	id     int64
	sum    []byte
	origin Origin
}

// sameEvent reports whether a delivery with body sum and origin is a
// duplicate of st rather than a conflict. Between two webhook deliveries
// only the same bytes are (a provider's retry resends them). A backfilled
// copy is the provider's API rendering of the event (another layout, maybe
// another API version) while the webhook is its endpoint's rendering: the
// same event id from the same provider is the same event, so either order
// is a plain duplicate.
func sameEvent(st storedDelivery, sum []byte, origin Origin) bool {
	return bytes.Equal(st.sum, sum) || st.origin == OriginBackfill || origin == OriginBackfill
}

// lookupStored reads the stored envelopes of the items at idx. FOR KEY
// SHARE keeps retention from deleting them meanwhile, and does not wait for
// a worker, which holds the row FOR NO KEY UPDATE for its whole transaction.
func lookupStored(ctx context.Context, tx pgx.Tx, items []prepared, idx []int) (map[deliveryKey]storedDelivery, error) {
	sources, ids := make([]string, len(idx)), make([]string, len(idx))
	for j, i := range idx {
		sources[j], ids[j] = items[i].d.Source, items[i].d.DeliveryID
	}
	return lookupStoredKeys(ctx, tx, sources, ids)
}

// lookupStoredKeys is lookupStored of (sources[j], ids[j]). It runs on the
// conflict path only (a duplicate, a taken-over key), and is planned at each
// call (pg.PlanEachCall): ingest's pool keeps one generic plan per statement
// (pg.Options.GenericPlans), and one made while envelope_key and envelope
// were empty and vacuumed (a new deployment after a VACUUM) is a sequential
// scan of every partition of both, hash-joined, at every duplicate.
func lookupStoredKeys(ctx context.Context, tx pgx.Tx, sources, ids []string) (map[deliveryKey]storedDelivery, error) {
	rows, err := tx.Query(ctx, `
		SELECT e.id, k.source, k.delivery_id, e.body_sha256, e.origin
		  FROM envelope_key k
		  JOIN envelope e ON e.id = k.envelope_id
		 WHERE (k.delivery_id, k.source) IN (SELECT * FROM unnest($2::text[], $1::text[]))
		 ORDER BY k.source, k.delivery_id
		   FOR KEY SHARE OF e`, pg.PlanEachCall, sources, ids)
	if err != nil {
		return nil, fmt.Errorf("load stored deliveries: %w", err)
	}
	stored := make(map[deliveryKey]storedDelivery, len(ids))
	var k deliveryKey
	var st storedDelivery
	_, err = pgx.ForEachRow(rows, []any{&st.id, &k.source, &k.id, &st.sum, &st.origin}, func() error {
		stored[k] = storedDelivery{id: st.id, sum: append([]byte(nil), st.sum...), origin: st.origin}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("load stored deliveries: %w", err)
	}
	return stored, nil
}

type digestKey struct{ source, digest string }

// claimDigests claims, in envelope_digest, the replay digests of the items
// at order that have one (NewDelivery.ReplayDigest), and returns the items
// to store (order, less the replays) and the replays: item -> the delivery
// id whose digest it carries. Each digest has one owner: the batch's first
// copy when its claim succeeds (the digest is new, or its holder's claim has
// expired), else the live holder. Every copy under the owner's delivery id is
// stored as usual (a provider's retry is then the duplicate it is); every
// copy under another id is a replay of the owner. Rows are claimed in
// (source, digest) order, so two batches cannot deadlock on them.
func claimDigests(ctx context.Context, tx pgx.Tx, items []prepared, order []int) ([]int, map[int]string, error) {
	var first map[digestKey]int
	var claim []int
	for _, i := range order {
		d := items[i].d
		if d.ReplayDigest == nil {
			continue
		}
		if first == nil {
			first = map[digestKey]int{}
		}
		k := digestKey{d.Source, string(d.ReplayDigest)}
		if _, ok := first[k]; !ok {
			first[k] = i
			claim = append(claim, i)
		}
	}
	if len(claim) == 0 {
		return order, nil, nil // no source of the batch checks replays: the common case costs nothing
	}
	slices.SortFunc(claim, func(a, b int) int {
		return cmp.Or(cmp.Compare(items[a].d.Source, items[b].d.Source), bytes.Compare(items[a].d.ReplayDigest, items[b].d.ReplayDigest))
	})
	n := len(claim)
	sources, digests, ids, windows := make([]string, n), make([][]byte, n), make([]string, n), make([]int64, n)
	for j, i := range claim {
		d := items[i].d
		sources[j], digests[j], ids[j], windows[j] = d.Source, d.ReplayDigest, d.DeliveryID, d.ReplayWindow.Microseconds()
	}
	rows, err := tx.Query(ctx, `
		INSERT INTO envelope_digest (source, digest, delivery_id, expires_at)
		SELECT source, digest, delivery_id, now() + window_us * interval '1 microsecond'
		  FROM unnest($1::text[], $2::bytea[], $3::text[], $4::bigint[]) WITH ORDINALITY AS c(source, digest, delivery_id, window_us, ord)
		 ORDER BY ord
		ON CONFLICT (source, digest) DO UPDATE SET delivery_id = EXCLUDED.delivery_id, expires_at = EXCLUDED.expires_at
		 WHERE envelope_digest.expires_at <= now()
		RETURNING source, digest`, sources, digests, ids, windows)
	if err != nil {
		return nil, nil, fmt.Errorf("claim replay digests: %w", err)
	}
	claimed := map[digestKey]bool{}
	var k digestKey
	var digest []byte
	if _, err := pgx.ForEachRow(rows, []any{&k.source, &digest}, func() error {
		k.digest = string(digest)
		claimed[k] = true
		return nil
	}); err != nil {
		return nil, nil, fmt.Errorf("claim replay digests: %w", err)
	}
	owner := map[digestKey]string{}
	for k := range claimed {
		owner[k] = items[first[k]].d.DeliveryID
	}
	if len(claimed) < n {
		// Held by a live claim: whose? (committed: the claim above waited
		// for any transaction still writing it)
		holders, err := digestHolders(ctx, tx, sources, digests)
		if err != nil {
			return nil, nil, err
		}
		for k, holder := range holders {
			if !claimed[k] {
				owner[k] = holder
			}
		}
	}
	// rest keeps order's (source, delivery id) order, less the replays.
	replayOf := map[int]string{}
	rest := make([]int, 0, len(order))
	for _, i := range order {
		d := items[i].d
		if d.ReplayDigest != nil {
			if o, ok := owner[digestKey{d.Source, string(d.ReplayDigest)}]; ok && o != d.DeliveryID {
				replayOf[i] = o
				continue
			}
		}
		rest = append(rest, i)
	}
	return rest, replayOf, nil
}

// digestHolders returns the delivery ids that hold the replay digests
// (sources[j], digests[j]) in envelope_digest. Like lookupStoredKeys, it
// runs only on the conflict path, and is planned at each call
// (pg.PlanEachCall): ingest's pool keeps one generic plan per statement, and
// one made while the table was empty and vacuumed scans all of it.
func digestHolders(ctx context.Context, tx pgx.Tx, sources []string, digests [][]byte) (map[digestKey]string, error) {
	rows, err := tx.Query(ctx, `
		SELECT g.source, g.digest, g.delivery_id
		  FROM envelope_digest g
		 WHERE (g.source, g.digest) IN (SELECT * FROM unnest($1::text[], $2::bytea[]))`, pg.PlanEachCall, sources, digests)
	if err != nil {
		return nil, fmt.Errorf("look up replay digests: %w", err)
	}
	holders := map[digestKey]string{}
	var k digestKey
	var digest []byte
	var holder string
	if _, err := pgx.ForEachRow(rows, []any{&k.source, &digest, &holder}, func() error {
		k.digest = string(digest)
		holders[k] = holder
		return nil
	}); err != nil {
		return nil, fmt.Errorf("look up replay digests: %w", err)
	}
	return holders, nil
}

// DeleteExpiredDigests deletes up to limit envelope_digest rows whose
// replay window has passed, and returns how many it deleted: the table
// holds a window's worth of deliveries, whatever the envelopes kept. The
// worker's reconcile runs it every minute.
func DeleteExpiredDigests(ctx context.Context, db DB, limit int) (int64, error) {
	// SKIP LOCKED: a row ingest is renewing is left for the next round
	// (waiting for it could deadlock, and the renewal makes it live); the
	// outer expires_at check keeps a row renewed meanwhile.
	tag, err := db.Exec(ctx, `
		DELETE FROM envelope_digest WHERE (source, digest) IN (
			SELECT source, digest FROM envelope_digest WHERE expires_at < now()
			 ORDER BY expires_at LIMIT $1 FOR UPDATE SKIP LOCKED)
		   AND expires_at < now()`, limit)
	if err != nil {
		return 0, fmt.Errorf("delete expired replay digests: %w", err)
	}
	return tag.RowsAffected(), nil
}
