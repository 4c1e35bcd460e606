package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"go.opentelemetry.io/otel/trace"

	"github.com/inboxhq/inbox/internal/envelope"
	"github.com/inboxhq/inbox/internal/pg"
	"github.com/inboxhq/inbox/internal/tracing"
)

// DefaultBatchSize is how many envelopes one replay transaction handles when
// ReplayRequest.BatchSize is 0.
const DefaultBatchSize = 500

// MaxBatchSize caps ReplayRequest.BatchSize.
const MaxBatchSize = 10000

// SampleSize is how many envelopes DryRun returns as a sample.
const SampleSize = 10

// maxSkippedIDs caps ReplayResult.SkippedIDs.
const maxSkippedIDs = 100

// JobInserter inserts River jobs inside a transaction. The River client of
// envelope.NewInsertClient is one.
type JobInserter interface {
	InsertManyTx(ctx context.Context, tx pgx.Tx, params []river.InsertManyParams) ([]*rivertype.JobInsertResult, error)
}

// ReplayRequest says what to replay, who asks, and why.
type ReplayRequest struct {
	Filter Filter
	// Actor and Reason are required; both are stored in envelope_replay.
	Actor  string
	Reason string
	// BatchSize is how many envelopes one transaction handles: DefaultBatchSize
	// when 0, at most MaxBatchSize.
	BatchSize int
	// Limit caps how many envelopes are replayed (skipped ones do not count);
	// 0 means no cap.
	Limit int
	// ProgressFunc, when set, is called once the matches are counted (no
	// batch yet) and after each batch commits, from the
	// goroutine that called Replay. It may cancel Replay's context: the
	// committed batches stay, and no further batch starts.
	ProgressFunc func(Progress)

	// beforeCommit, in tests, runs in each batch just before COMMIT.
	beforeCommit func(batch int)
}

// Progress is a replay's state after a committed batch.
type Progress struct {
	BatchID string
	// Total is how many envelopes matched at the start, capped by Limit: the
	// most that the replay will scan.
	Total    int
	Batches  int
	Scanned  int // replayed + skipped
	Replayed int
	Skipped  int
}

// ReplayResult sums up a replay run. On an error it holds what committed
// before the error.
type ReplayResult struct {
	// BatchID is shared by the run's envelope_replay rows.
	BatchID string `json:"batch_id"`
	// Matched is how many envelopes the filter selected at the start.
	Matched  int `json:"matched"`
	Replayed int `json:"replayed"`
	// Skipped envelopes already had a live job (waiting, scheduled, retrying
	// or running): they were left alone, with no audit row and no new job.
	Skipped    int     `json:"skipped_already_queued"`
	SkippedIDs []int64 `json:"skipped_ids"` // the first 100
	Batches    int     `json:"batches"`
	// LimitReached is true when the run stopped at ReplayRequest.Limit with
	// matching envelopes left: run again to replay them.
	LimitReached bool `json:"limit_reached"`
	// Interrupted is true when the context ended the run early; every batch
	// counted here committed whole, and the one in flight rolled back.
	Interrupted bool          `json:"interrupted"`
	Duration    time.Duration `json:"-"`
	DurationMS  float64       `json:"duration_ms"`
}

// Validate checks r before anything is read or written: its selection
// (ValidateSelection), a reason and an actor.
func (r ReplayRequest) Validate() error {
	if err := r.ValidateSelection(); err != nil {
		return err
	}
	return validateAudit(r.Actor, r.Reason, "replayed")
}

// validateAudit checks what an audited change records with every envelope
// it changes (verb: "replayed", "changed"): a reason and an actor, within
// their lengths.
func validateAudit(actor, reason, verb string) error {
	if strings.TrimSpace(reason) == "" {
		return errors.New("a reason is required (it is stored with every " + verb + " envelope)")
	}
	if strings.TrimSpace(actor) == "" {
		return errors.New("an actor is required")
	}
	if n := utf8.RuneCountInString(reason); n > MaxReasonLen {
		return fmt.Errorf("the reason has %d characters: at most %d (it is stored with every %s envelope)", n, MaxReasonLen, verb)
	}
	if n := utf8.RuneCountInString(actor); n > MaxActorLen {
		return fmt.Errorf("the actor has %d characters: at most %d", n, MaxActorLen)
	}
	return nil
}

// The longest reason and actor a replay records.
const (
	MaxReasonLen = 1000
	MaxActorLen  = 200
)

// ValidateSelection checks what a replay and its dry run (DryRun, which
// records nothing and needs no reason or actor) share: a valid filter that
// selects something, a batch size and a limit in range.
func (r ReplayRequest) ValidateSelection() error {
	if err := r.Filter.Validate(); err != nil {
		return err
	}
	if r.Filter.IsEmpty() {
		return errors.New("select envelopes by id or with at least one filter (replaying everything is not allowed)")
	}
	if r.Filter.Status == envelope.StatusResolved {
		return errResolvedNotReplayed
	}
	if r.BatchSize < 0 || r.BatchSize > MaxBatchSize {
		return fmt.Errorf("batch size %d: want 1 to %d", r.BatchSize, MaxBatchSize)
	}
	if r.Limit < 0 {
		return fmt.Errorf("limit %d: must not be negative", r.Limit)
	}
	return nil
}

// errResolvedNotReplayed refuses a replay (or its dry run) of --status resolved.
var errResolvedNotReplayed = &InputError{Field: "status", Err: errors.New("resolved envelopes are not replayed (an operator closed them); un-resolve them first (worker envelopes unresolve)")}

// ErrInterrupted is wrapped by Replay's error when its context ended the run.
var ErrInterrupted = errors.New("replay interrupted")

// Replay re-processes the envelopes req.Filter selects, in id order, in
// batches of req.BatchSize. Each batch is one transaction that locks its
// envelope rows (FOR UPDATE, in id order, so concurrent replays serialize
// instead of deadlocking), and for every envelope without a live job inserts
// a River job (jobs.InsertManyTx), resets the envelope to pending
// (processed_at NULL; result and last_error stay until it is processed
// again) and writes an envelope_replay row (actor, reason, the filter, the
// run's batch id, the prior status and the job id). A batch commits whole or
// not at all.
//
// An envelope that already has a live job is skipped and counted as already
// queued, so no envelope ever gets a second waiting job: it is safe to run
// twice, and concurrently. Replaying a done envelope re-runs its handler,
// whose idempotent effects (ledger.Post) make that a recorded no-op.
//
// Unknown ids in req.Filter.IDs return a *NotFoundError before anything
// changes. When ctx ends, the batch in flight rolls back, no further batch
// starts, and Replay returns what committed with an error wrapping
// ErrInterrupted and ctx's error.
func Replay(ctx context.Context, pool *pgxpool.Pool, jobs JobInserter, req ReplayRequest) (ReplayResult, error) {
	start := time.Now()
	if err := req.Validate(); err != nil {
		return ReplayResult{}, err
	}
	if req.BatchSize == 0 {
		req.BatchSize = DefaultBatchSize
	}
	f := req.Filter
	f.IDs = dedupe(f.IDs)

	var res ReplayResult
	var err error
	clock, err := envelope.ReadClock(ctx, pool)
	if err != nil {
		return res, fmt.Errorf("start replay: %w", err)
	}
	now := clock.Now
	if err := pool.QueryRow(ctx, `SELECT gen_random_uuid()::text`).Scan(&res.BatchID); err != nil {
		return res, fmt.Errorf("start replay: %w", err)
	}
	if len(f.IDs) > 0 {
		missing, err := envelope.Missing(ctx, pool, f.IDs)
		if err != nil {
			return res, err
		}
		if len(missing) > 0 {
			return res, &NotFoundError{IDs: missing}
		}
		if err := checkPurged(ctx, pool, f.IDs); err != nil {
			return res, err
		}
	}
	f.replayable = true
	sel := f.selection(clock)
	if res.Matched, err = envelope.Count(ctx, pool, sel); err != nil {
		return res, err
	}
	filterJSON, err := json.Marshal(f.record(now, req.Limit))
	if err != nil {
		return res, fmt.Errorf("encode filter: %w", err)
	}
	total := res.Matched
	if req.Limit > 0 && req.Limit < total {
		total = req.Limit
	}
	if req.ProgressFunc != nil {
		req.ProgressFunc(Progress{BatchID: res.BatchID, Total: total})
	}

	b := batcher{pool: pool, jobs: jobs, sel: sel, req: req,
		audit: envelope.ReplayAudit{Actor: req.Actor, Reason: req.Reason, Filter: filterJSON, BatchID: res.BatchID}}
	if tracing.Enabled() {
		var span trace.Span
		ctx, span = startReplaySpan(ctx, res.BatchID, res.Matched)
		b.span = span
		defer endReplaySpan(span, &res)
	}
	var after int64
	finish := func(err error) (ReplayResult, error) {
		res.Duration = time.Since(start)
		res.DurationMS = float64(res.Duration.Microseconds()) / 1000
		if res.SkippedIDs == nil {
			res.SkippedIDs = []int64{}
		}
		return res, err
	}
	for {
		if req.Limit > 0 && res.Replayed >= req.Limit {
			// Reached only if the limit left some matching envelope out.
			beyond := sel
			beyond.AfterID = after
			more, err := envelope.Exists(ctx, pool, beyond)
			if err != nil {
				return finish(fmt.Errorf("look for envelopes beyond the limit: %w", err))
			}
			res.LimitReached = more
			return finish(nil)
		}
		if ctx.Err() != nil {
			res.Interrupted = true
			return finish(fmt.Errorf("%w after %d batches (%d replayed): %w", ErrInterrupted, res.Batches, res.Replayed, ctx.Err()))
		}
		size := req.BatchSize
		if req.Limit > 0 && req.Limit-res.Replayed < size {
			size = req.Limit - res.Replayed
		}
		out, err := b.run(ctx, res.Batches+1, after, size)
		if err != nil {
			if ctx.Err() != nil {
				res.Interrupted = true
				return finish(fmt.Errorf("%w after %d batches (%d replayed): %w", ErrInterrupted, res.Batches, res.Replayed, ctx.Err()))
			}
			return finish(fmt.Errorf("replay batch %d (after %d replayed): %w", res.Batches+1, res.Replayed, err))
		}
		if out.scanned == 0 {
			return finish(nil)
		}
		after = out.lastID
		res.Batches++
		res.Replayed += out.replayed
		res.Skipped += len(out.skipped)
		for _, id := range out.skipped {
			if len(res.SkippedIDs) < maxSkippedIDs {
				res.SkippedIDs = append(res.SkippedIDs, id)
			}
		}
		if req.ProgressFunc != nil {
			req.ProgressFunc(Progress{BatchID: res.BatchID, Total: total, Batches: res.Batches,
				Scanned: res.Replayed + res.Skipped, Replayed: res.Replayed, Skipped: res.Skipped})
		}
	}
}

// batcher runs one replay's batches.
type batcher struct {
	pool  *pgxpool.Pool
	jobs  JobInserter
	sel   envelope.Selection
	req   ReplayRequest
	audit envelope.ReplayAudit
	// span is the replay's span while tracing is on: it links to the
	// trace of every envelope replayed (their attempts join those traces).
	span trace.Span
}

type batchOutcome struct {
	scanned  int
	lastID   int64
	replayed int
	skipped  []int64
}

// run replays the next size envelopes with an id above after, in one
// transaction. Statements run under ctx, so an interruption aborts the batch;
// COMMIT runs only if ctx is still live, and is not itself cancelled, so a
// batch reported committed did commit.
func (b *batcher) run(ctx context.Context, n int, after int64, size int) (batchOutcome, error) {
	var out batchOutcome
	tx, err := b.pool.Begin(ctx)
	if err != nil {
		return out, fmt.Errorf("begin: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // a no-op after COMMIT

	sel := b.sel
	sel.AfterID = after
	locked, err := envelope.LockForReplay(ctx, tx, sel, size)
	if err != nil {
		return out, err
	}
	if len(locked) == 0 {
		return out, nil
	}
	out.scanned, out.lastID = len(locked), locked[len(locked)-1].ID

	prior := make(map[int64]envelope.Status, len(locked))
	traces := map[int64]string{}
	params := make([]river.InsertManyParams, 0, len(locked))
	for _, c := range locked {
		prior[c.ID] = c.Status
		if c.TraceContext != "" {
			traces[c.ID] = c.TraceContext
		}
		if c.Live {
			out.skipped = append(out.skipped, c.ID)
			continue
		}
		// River's default limit: the worker bounds the attempts by the
		// source's max_attempts (envelope.ProcessJob).
		params = append(params, envelope.ProcessJob(c.ID, c.Source, 0))
	}
	var replayed []envelope.Replayed
	var replayIDs []int64
	if len(params) > 0 {
		results, err := b.jobs.InsertManyTx(ctx, tx, params)
		if err != nil {
			return out, fmt.Errorf("insert jobs: %w", err)
		}
		for _, r := range results {
			var a envelope.ProcessArgs
			if err := json.Unmarshal(r.Job.EncodedArgs, &a); err != nil {
				return out, fmt.Errorf("decode args of job %d: %w", r.Job.ID, err)
			}
			if r.UniqueSkippedAsDuplicate {
				// River's unique opts found a live job our check did not
				// see (one inserted outside a replay): leave it alone.
				out.skipped = append(out.skipped, a.EnvelopeID)
				continue
			}
			replayIDs = append(replayIDs, a.EnvelopeID)
			replayed = append(replayed, envelope.Replayed{EnvelopeID: a.EnvelopeID, PriorStatus: prior[a.EnvelopeID], JobID: r.Job.ID})
		}
	}
	if err := envelope.RecordReplays(ctx, tx, replayed, b.audit); err != nil {
		return out, err
	}
	out.replayed = len(replayIDs)
	if b.req.beforeCommit != nil {
		b.req.beforeCommit(n)
	}
	if err := ctx.Err(); err != nil {
		return out, err
	}
	if err := tx.Commit(context.WithoutCancel(ctx)); err != nil {
		return out, fmt.Errorf("commit: %w", err)
	}
	if b.span != nil {
		linkReplayed(b.span, replayIDs, traces)
	}
	return out, nil
}

// DryRunResult is what a replay would do now.
type DryRunResult struct {
	Matched int `json:"matched"`
	// AlreadyQueued of them have a live job and would be skipped.
	AlreadyQueued int `json:"already_queued"`
	// WouldReplay is Matched - AlreadyQueued, capped by the limit.
	WouldReplay int `json:"would_replay"`
	// Sample is the first SampleSize matches, in the order a replay takes them
	// (by id).
	Sample []Summary `json:"sample"`
	// MaxID is the highest matching id and At the database's clock of the
	// snapshot: a replay of the same Filter with MaxID set and relative
	// bounds resolved at At selects what this dry run saw, and no envelope
	// stored since.
	MaxID int64     `json:"max_id"`
	At    time.Time `json:"at"`
	// ByStatus splits Matched by the envelopes' status now: a replay of done
	// ones re-runs their handlers (a recorded no-op for the ledger).
	ByStatus map[envelope.Status]int `json:"by_status"`
	// ReplayIDs are the envelopes a replay would take now, in its order,
	// when they are at most MaxIDs (nil beyond): Filter.Within pins a
	// replay to exactly them.
	ReplayIDs []int64 `json:"replay_ids,omitempty"`
}

// DryRun reports how many envelopes f selects, how many of them already have
// a live job, and the first few. It runs in a read-only transaction and
// changes nothing. Unknown ids in f.IDs return a *NotFoundError.
func DryRun(ctx context.Context, pool *pgxpool.Pool, f Filter, limit int) (DryRunResult, error) {
	if err := f.Validate(); err != nil {
		return DryRunResult{}, err
	}
	if f.Status == envelope.StatusResolved {
		return DryRunResult{}, errResolvedNotReplayed
	}
	if limit < 0 {
		return DryRunResult{}, fmt.Errorf("limit %d: must not be negative", limit)
	}
	f.IDs = dedupe(f.IDs)
	var res DryRunResult
	err := readOnly(ctx, pool, func(tx pgx.Tx, clock envelope.Clock) error {
		if len(f.IDs) > 0 {
			missing, err := envelope.Missing(ctx, tx, f.IDs)
			if err != nil {
				return err
			}
			if len(missing) > 0 {
				return &NotFoundError{IDs: missing}
			}
			if err := checkPurged(ctx, tx, f.IDs); err != nil {
				return err
			}
		}
		f.replayable = true
		sel := f.selection(clock)
		var err error
		if res.ByStatus, res.MaxID, err = envelope.CountByStatus(ctx, tx, sel); err != nil {
			return err
		}
		for _, n := range res.ByStatus {
			res.Matched += n
		}
		if res.AlreadyQueued, err = envelope.CountLive(ctx, tx, sel); err != nil {
			return err
		}
		if res.Sample, err = envelope.Summaries(ctx, tx, sel, SampleSize, true); err != nil {
			return fmt.Errorf("sample envelopes: %w", err)
		}
		res.At = clock.Now
		if res.Matched > MaxIDs {
			return nil
		}
		ids, err := envelope.MatchingIDs(ctx, tx, sel, MaxIDs)
		if err != nil {
			return err
		}
		live, err := envelope.LiveJobs(ctx, tx, ids)
		if err != nil {
			return err
		}
		res.ReplayIDs = []int64{}
		for _, id := range ids {
			if !live[id] && (limit == 0 || len(res.ReplayIDs) < limit) {
				res.ReplayIDs = append(res.ReplayIDs, id)
			}
		}
		return nil
	})
	if err != nil {
		return DryRunResult{}, err
	}
	res.WouldReplay = res.Matched - res.AlreadyQueued
	if limit > 0 && limit < res.WouldReplay {
		res.WouldReplay = limit
	}
	return res, nil
}

// checkPurged returns a *PurgedError naming the ids whose body retention
// dropped, or a *ResolvedError naming the resolved ones: neither can be
// replayed.
func checkPurged(ctx context.Context, q pg.Querier, ids []int64) error {
	purged, err := envelope.Purged(ctx, q, ids)
	if err != nil {
		return err
	}
	if len(purged) > 0 {
		return &PurgedError{IDs: purged}
	}
	resolved, err := envelope.InStatus(ctx, q, ids, envelope.StatusResolved)
	if err != nil {
		return err
	}
	if len(resolved) > 0 {
		return &ResolvedError{IDs: resolved}
	}
	return nil
}
