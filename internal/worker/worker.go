package worker

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"go.opentelemetry.io/otel/trace"

	"github.com/inboxhq/inbox/internal/envelope"
	"github.com/inboxhq/inbox/internal/groupcommit"
	"github.com/inboxhq/inbox/internal/handlers"
	"github.com/inboxhq/inbox/internal/labels"
	"github.com/inboxhq/inbox/internal/ledger"
	"github.com/inboxhq/inbox/internal/metrics"
	"github.com/inboxhq/inbox/internal/pg"
	"github.com/inboxhq/inbox/internal/riverjob"
	"github.com/inboxhq/inbox/internal/tracing"
)

// Policy bounds waiting and retrying.
type Policy struct {
	// SnoozeDefault is how long a not-ready envelope waits when its handler
	// names no duration.
	SnoozeDefault time.Duration
	// MaxSnooze caps one snooze, whatever a downstream's Retry-After says.
	MaxSnooze time.Duration
	// MaxAge bounds snoozing: an envelope older than this fails instead of
	// waiting again. A provider's retry window raises it, a source's own
	// max_age replaces it (see maxAge).
	MaxAge time.Duration
	// JobTimeout bounds one attempt (River rescues a job whose worker died
	// only when it has one; it is never disabled).
	JobTimeout time.Duration
}

// DefaultPolicy is the policy of a worker configured with nothing.
var DefaultPolicy = Policy{
	SnoozeDefault: 10 * time.Second,
	MaxSnooze:     15 * time.Minute,
	MaxAge:        24 * time.Hour,
	JobTimeout:    time.Minute,
}

// Batching bounds the worker's transactions. Zero values take the
// defaults, chosen by measurement (docs/benchmarks.md).
type Batching struct {
	// MaxBatch is the most envelopes one transaction processes (default
	// and most 60: each envelope's handler runs under a savepoint, and
	// PostgreSQL keeps 64 subtransactions per transaction in shared memory
	// before snapshots of every session slow down).
	MaxBatch int
	// MaxConcurrent is how many batch transactions run at once, each on its
	// own pool connection (default 3).
	MaxConcurrent int
	// MaxUnbatched is how many envelopes of sources with forwarding (whose
	// handlers make outbound HTTP calls, so each gets a transaction of its
	// own) are processed at once (default 10).
	MaxUnbatched int
}

// MaxBatchLimit is the largest Batching.MaxBatch.
const MaxBatchLimit = 60

// DefaultBatching is the batching of a worker configured with nothing.
var DefaultBatching = Batching{MaxBatch: 60, MaxConcurrent: 3, MaxUnbatched: 10}

func (b Batching) withDefaults() Batching {
	if b.MaxBatch <= 0 {
		b.MaxBatch = DefaultBatching.MaxBatch
	}
	b.MaxBatch = min(b.MaxBatch, MaxBatchLimit)
	if b.MaxConcurrent <= 0 {
		b.MaxConcurrent = DefaultBatching.MaxConcurrent
	}
	if b.MaxUnbatched <= 0 {
		b.MaxUnbatched = DefaultBatching.MaxUnbatched
	}
	return b
}

// Connections is how many pool connections the batches use at most.
func (b Batching) Connections() int {
	b = b.withDefaults()
	return b.MaxConcurrent + b.MaxUnbatched
}

// ProcessWorker is the River worker for envelope.ProcessArgs.
//
// River calls Work once per job, from as many goroutines as it has
// workers; Work hands its job to a group commit (package groupcommit) and
// waits for its own verdict. Jobs that wait together are processed in one
// transaction: their envelopes locked in one statement, the handlers run
// (a handler's error runs the batch again with a savepoint around each, so
// it rolls back that envelope's effects alone), their payments written in
// one statement, every outcome recorded in one statement, one COMMIT.
// The jobs of the envelopes that ended done or ignored are deleted in the
// same transaction, in one statement (riverjob.DeleteRunning).
type ProcessWorker struct {
	river.WorkerDefaults[envelope.ProcessArgs]

	Pool *pgxpool.Pool
	// Registry routes each envelope to its handler (handlers.Resolve): a
	// *handlers.Registry, or a decorator of one (forwarding, accounts).
	Registry handlers.Router
	Policy   Policy
	Batching Batching
	Logger   *slog.Logger
	// Name identifies this process in envelope_attempt.worker.
	Name string
	// Sources holds per-source throttles (and backoff, applied by the
	// client's retry policy).
	Sources map[string]SourcePolicy
	// Metrics, when set, counts attempts, snoozes, latency and postings.
	Metrics *metrics.Worker
	// Yield, when set, holds each batch for its share of the rate limit
	// while ingest reports store pressure.
	Yield *Yield

	once      sync.Once
	batched   *groupcommit.Committer[*river.Job[envelope.ProcessArgs], error]
	unbatched *groupcommit.Committer[*river.Job[envelope.ProcessArgs], error]
	accounts  *ledger.Accounts
}

func (w *ProcessWorker) init() {
	w.once.Do(func() {
		b := w.Batching.withDefaults()
		w.accounts = ledger.NewAccounts(w.Pool)
		timeout := w.Timeout(nil)
		w.batched = groupcommit.New(w.yieldThenProcess, groupcommit.Options{MaxBatch: b.MaxBatch, MaxConcurrent: b.MaxConcurrent, Timeout: timeout})
		w.unbatched = groupcommit.New(w.yieldThenProcess, groupcommit.Options{MaxBatch: 1, MaxConcurrent: b.MaxUnbatched, Timeout: timeout})
	})
}

// Timeout implements river.Worker: every attempt has a timeout.
func (w *ProcessWorker) Timeout(*river.Job[envelope.ProcessArgs]) time.Duration {
	if w.Policy.JobTimeout > 0 {
		return w.Policy.JobTimeout
	}
	return DefaultPolicy.JobTimeout
}

// errLostRace means another attempt of this job owns it now (this one was
// rescued as stuck and re-run elsewhere): everything is rolled back.
var errLostRace = errors.New("lost the job to another attempt")

// errIsolate means a handler failed in a batch run without savepoints:
// the batch is rolled back and run again with one savepoint per envelope.
var errIsolate = errors.New("a handler failed: run the batch again with savepoints")

// Work processes one envelope. Its effects, result and status commit
// together or not at all; the River action it returns, after the commit
// that recorded it, is decide's.
func (w *ProcessWorker) Work(ctx context.Context, job *river.Job[envelope.ProcessArgs]) error {
	w.init()
	lane := w.batched
	if w.Registry.Outbound(job.Args.Source) {
		lane = w.unbatched
	}
	verdict, err := lane.Do(ctx, job)
	if err != nil {
		// Nothing was committed (the batch failed, or ctx ended while the
		// job waited for one): River retries, and decides again.
		return err
	}
	return verdict
}

// attempt is one job's progress through a batch.
type attempt struct {
	job *river.Job[envelope.ProcessArgs]
	// throttled, when set, is the throttle's refusal of a slot: the
	// attempt's failure, and no handler runs.
	throttled *throttledError
	env       *envelope.Envelope
	startedAt time.Time
	// busy means another transaction holds the envelope's row: nothing of
	// the job was written, and it is processed again on its own.
	busy bool
	// res is what the attempt found or did, dec what decide made of it
	// (both set by settle).
	res result
	dec decision
	// span is the attempt's span while tracing is on (nil when off).
	span trace.Span
}

// settled reports whether the attempt has its result, or is busy.
func (a *attempt) settled() bool { return a.busy || a.res.kind != foundNothing }

// settle sets the attempt's result and decides it.
func (a *attempt) settle(r result, b bounds) {
	a.res, a.dec = r, decide(r, b)
}

// yieldThenProcess is the group commit's batch: processBatch, after the
// batch's share of the yield limit while ingest reports store pressure
// (none when its longest-waiting job waited under the yield's MinLag,
// unless ingest refuses deliveries, or past its MaxLag).
func (w *ProcessWorker) yieldThenProcess(ctx context.Context, jobs []*river.Job[envelope.ProcessArgs]) []groupcommit.Result[error] {
	w.Yield.wait(ctx, len(jobs), batchLag(jobs))
	return w.processBatch(ctx, jobs)
}

// batchLag is how long the longest-waiting of jobs waited to be fetched
// after it became available: from its scheduled time (its insert, or the
// end of its snooze or retry backoff) to its fetch (AttemptedAt). River
// sets both on the database's clock for an inserted job, so no host's
// skew enters; a snooze or backoff's end is set on the worker's clock.
func batchLag(jobs []*river.Job[envelope.ProcessArgs]) time.Duration {
	var lag time.Duration
	for _, j := range jobs {
		if j.AttemptedAt != nil {
			lag = max(lag, j.AttemptedAt.Sub(j.ScheduledAt))
		}
	}
	return lag
}

// processBatch processes jobs in one transaction and returns each one's
// River verdict. When the transaction fails as a whole it is tried again
// one job per transaction, so that the job at fault fails alone; jobs
// whose envelope another transaction holds are processed after the batch,
// each in a transaction of its own that waits for the row.
//
// A batch runs first without savepoints, which saves two round trips per
// envelope and keeps the transaction free of subtransactions; the first
// handler error rolls it back, and it runs again with a savepoint around
// each handler, so that error's envelope is rolled back alone. Handlers are
// idempotent (they may run again after any crash), so the second run is
// safe.
//
// The batch runs its envelopes in the order they were received (envelope
// id), whatever order their jobs joined it in: a refund stored after its
// payment, and processed in the same batch, finds the payment posted.
func (w *ProcessWorker) processBatch(ctx context.Context, jobs []*river.Job[envelope.ProcessArgs]) []groupcommit.Result[error] {
	if !slices.IsSortedFunc(jobs, byEnvelopeID) {
		order := make([]int, len(jobs))
		for i := range order {
			order[i] = i
		}
		slices.SortStableFunc(order, func(a, b int) int { return byEnvelopeID(jobs[a], jobs[b]) })
		sorted := make([]*river.Job[envelope.ProcessArgs], len(jobs))
		for i, o := range order {
			sorted[i] = jobs[o]
		}
		res := w.processBatch(ctx, sorted)
		out := make([]groupcommit.Result[error], len(jobs))
		for i, o := range order {
			out[o] = res[i]
		}
		return out
	}
	out := make([]groupcommit.Result[error], len(jobs))
	batched := len(jobs) > 1
	atts, err := w.processTx(ctx, jobs, batched, !batched)
	if errors.Is(err, errIsolate) {
		atts, err = w.processTx(ctx, jobs, batched, true)
	}
	if err != nil {
		if len(jobs) == 1 || ctx.Err() != nil {
			// Nothing was committed; River retries (and a lost race finds
			// the envelope final).
			for i, job := range jobs {
				w.Logger.Warn("envelope attempt rolled back", "envelope_id", job.Args.EnvelopeID, "job_id", job.ID,
					"attempt", job.Attempt, "batch", len(jobs), "error", err)
				out[i].Err = err
			}
			return out
		}
		w.Logger.Warn("envelope batch rolled back: processing its envelopes one by one", "envelopes", len(jobs), "error", err)
		for i := range jobs {
			out[i] = w.processBatch(ctx, jobs[i:i+1])[0]
		}
		return out
	}
	for i, a := range atts {
		switch {
		case a.busy:
			out[i] = w.processBatch(ctx, jobs[i:i+1])[0]
		case a.res.kind == foundNotFound:
			w.observeUnprocessed(a)
			out[i].Value = a.dec.river
		case a.res.kind == foundLostRace:
			w.observeUnprocessed(a)
			w.Logger.Warn("envelope attempt rolled back", "envelope_id", a.job.Args.EnvelopeID, "job_id", a.job.ID, "attempt", a.job.Attempt, "error", a.res.err)
			out[i].Err = a.dec.river
		default:
			w.observe(ctx, a)
			out[i].Value = a.dec.river
		}
	}
	return out
}

func byEnvelopeID(a, b *river.Job[envelope.ProcessArgs]) int {
	return cmp.Compare(a.Args.EnvelopeID, b.Args.EnvelopeID)
}

// processTx is one transaction over jobs: lock, fence, handlers (under
// savepoints when savepoints is set, their payments deferred to one
// statement otherwise), one statement recording every outcome, one
// deleting the finished envelopes' jobs.
func (w *ProcessWorker) processTx(ctx context.Context, jobs []*river.Job[envelope.ProcessArgs], skipLocked, savepoints bool) ([]*attempt, error) {
	atts := make([]*attempt, len(jobs))
	ids := make([]int64, len(jobs))
	for i, job := range jobs {
		atts[i] = &attempt{job: job}
		ids[i] = job.Args.EnvelopeID
	}
	err := pgx.BeginFunc(ctx, w.Pool, func(tx pgx.Tx) error {
		envs, clocks, err := envelope.LockMany(ctx, tx, ids, skipLocked)
		if err != nil {
			return err
		}
		var missing []int64
		for _, a := range atts {
			id := a.job.Args.EnvelopeID
			if a.env = envs[id]; a.env == nil {
				missing = append(missing, id)
				continue
			}
			a.startedAt = clocks[id]
		}
		if len(missing) > 0 {
			exist := map[int64]bool{}
			if skipLocked {
				if exist, err = envelope.Existing(ctx, tx, missing); err != nil {
					return err
				}
			}
			for _, a := range atts {
				if id := a.job.Args.EnvelopeID; a.env == nil {
					if exist[id] {
						a.busy = true
					} else {
						a.settle(result{kind: foundNotFound, err: fmt.Errorf("envelope %d: %w", id, envelope.ErrNotFound)}, bounds{})
					}
				}
			}
		}
		if err := fence(ctx, tx, atts); err != nil {
			return err
		}
		var recs []envelope.Record
		var postings *ledger.Deferred
		if !savepoints {
			// The optimistic pass writes the batch's payments in one
			// statement; any conflict runs the batch again with each
			// posting written, and answered, on its own.
			postings = ledger.NewDeferred(tx)
		}
		for _, a := range atts {
			if a.settled() {
				continue
			}
			r, err := w.try(ctx, tx, a, savepoints, postings)
			if err != nil {
				return err
			}
			a.settle(r, w.bounds(a))
			if a.dec.recorded() {
				recs = append(recs, w.record(a))
			}
		}
		if err := postings.Flush(ctx); errors.Is(err, ledger.ErrDeferredConflict) {
			return fmt.Errorf("%w (%v)", errIsolate, err)
		} else if err != nil {
			return err
		}
		if len(recs) > 0 {
			done, err := envelope.FinishMany(ctx, tx, w.Name, recs)
			if err != nil {
				return err
			}
			for _, r := range recs {
				if !done[r.EnvelopeID] {
					// Impossible while this transaction holds the row locked
					// and saw it pending; roll everything back rather than
					// commit a handler's effects without their envelope's
					// status.
					return fmt.Errorf("envelope %d: %w", r.EnvelopeID, envelope.ErrNotPending)
				}
			}
		}
		return endJobs(ctx, tx, atts)
	})
	endAttemptSpans(atts, err)
	return atts, err
}

// endJobs deletes the jobs of the attempts whose envelope is final and
// whose verdict is nil, in the batch's transaction and in one statement
// (riverjob.DeleteRunning): a final envelope never has a live job, so a
// replay right after it is processed finds none in its way, and no
// completed row is left for River's cleaner to delete again. River's
// completer, when Work then returns nil, finds no row and moves on. The
// fence holds the job rows locked, running at this attempt, so every one
// must be deleted.
func endJobs(ctx context.Context, tx pgx.Tx, atts []*attempt) error {
	var ids []int64
	for _, a := range atts {
		if !a.busy && a.dec.river == nil {
			ids = append(ids, a.job.ID)
		}
	}
	deleted, err := riverjob.DeleteRunning(ctx, tx, ids)
	if err != nil {
		return err
	}
	for _, id := range ids {
		if !deleted[id] {
			return fmt.Errorf("end job %d: not running: %w", id, errLostRace)
		}
	}
	return nil
}

// try is one attempt of an envelope found and owned, inside the batch
// transaction: the throttle's slot, then the handler (under a savepoint when
// savepoints is set). It returns what the attempt did; decide says what
// becomes of it. An error is the whole transaction's: a throttle slot or a
// savepoint that cannot be taken or undone, or errIsolate for a handler
// error without a savepoint.
func (w *ProcessWorker) try(ctx context.Context, tx pgx.Tx, a *attempt, savepoints bool, postings *ledger.Deferred) (result, error) {
	if err := w.throttle(ctx, a); err != nil {
		return result{}, err
	}
	env := a.env
	if tracing.Enabled() {
		ctx, a.span = startAttemptSpan(ctx, a, savepoints)
	}
	if env.Status != envelope.StatusPending {
		// Already final (processed by an earlier attempt that committed,
		// or a replay's job raced): only the job needs ending.
		return result{kind: foundFinal, status: env.Status}, nil
	}
	if a.throttled != nil {
		return result{kind: foundFailed, err: a.throttled}, nil
	}
	h, ok := handlers.Resolve(w.Registry, env)
	if !ok {
		event := env.EventType
		if event == "" {
			event = "(none: the delivery named no event type)"
		}
		reason, _ := json.Marshal(map[string]string{"reason": "no handler for " + env.Provider + " event " + event})
		return result{kind: foundIgnored, value: reason}, nil
	}
	return w.handle(ctx, tx, a, h, savepoints, postings)
}

// bounds are a's bounds for decide: its attempt, River's limit and the
// source's, the envelope's age at the attempt's start and the policy for
// its source and provider.
func (w *ProcessWorker) bounds(a *attempt) bounds {
	return bounds{
		attempt:   a.job.Attempt,
		riverMax:  a.job.MaxAttempts,
		sourceMax: w.Sources[a.env.Source].MaxAttempts,
		age:       a.startedAt.Sub(a.env.WaitingSince()),
		policy:    w.policyFor(a.env),
	}
}

// record is the row a's decision writes.
func (w *ProcessWorker) record(a *attempt) envelope.Record {
	rec := envelope.Record{EnvelopeID: a.env.ID, Status: a.dec.status, Attempt: envelope.Attempt{
		JobID: a.job.ID, Attempt: a.job.Attempt, StartedAt: a.startedAt, Worker: w.Name,
		Outcome: a.dec.outcome, Error: a.dec.reason, Cause: string(a.dec.cause)}}
	if a.res.kind != foundFailed {
		rec.Result = a.res.value
	}
	return rec
}

// handle runs h for a's envelope, under a savepoint when savepoints is set
// (its effects and its error's aftermath rolled back alone when it fails),
// and returns what it did: done with its result and posting, or failed with
// its error. Without savepoints a handler error is errIsolate: the caller
// rolls the whole transaction back.
func (w *ProcessWorker) handle(ctx context.Context, tx pgx.Tx, a *attempt, h handlers.Handler, savepoints bool, postings *ledger.Deferred) (result, error) {
	effects := &handlers.Effects{}
	ctx = handlers.WithEffects(ctx, effects)
	run := handlers.Run{Tx: tx, Envelope: a.env, Account: w.Sources[a.env.Source].AccountID}
	ran := func(value json.RawMessage, err error) result {
		if err != nil {
			w.logPanic(a.env, err)
			return result{kind: foundFailed, err: err}
		}
		return result{kind: foundDone, value: value, posting: effects.Posting}
	}
	if !savepoints {
		var deferred *ledger.Deferred
		if a.env.Attempts == 0 && a.env.LastReplayedAt == nil {
			// A first attempt of a never-replayed envelope: its payment is
			// almost surely new to the ledger, so it can be written with
			// the batch's others (a replay would conflict and cost the
			// batch a second run).
			deferred = postings
		}
		run.Ledger = ledger.NewWriter(tx, w.accounts, deferred).WithDelivery(a.env.Source, a.env.DeliveryID)
		r := ran(runTracedHandler(ctx, h, run))
		if r.err != nil {
			return r, fmt.Errorf("envelope %d: %w (%v)", a.env.ID, errIsolate, r.err)
		}
		return r, nil
	}
	sp, err := tx.Begin(ctx)
	if err != nil {
		return result{}, fmt.Errorf("savepoint for envelope %d: %w", a.env.ID, err)
	}
	// Under its savepoint an envelope posts at once: the savepoint's
	// rollback must undo its postings.
	run.Tx, run.Ledger = sp, ledger.NewWriter(sp, w.accounts, nil).WithDelivery(a.env.Source, a.env.DeliveryID)
	r := ran(runTracedHandler(ctx, h, run))
	if r.err == nil {
		if err := sp.Commit(ctx); err != nil {
			return result{}, fmt.Errorf("release savepoint of envelope %d: %w", a.env.ID, err)
		}
		return r, nil
	}
	if err := sp.Rollback(ctx); err != nil {
		return result{}, fmt.Errorf("roll back to savepoint of envelope %d: %w (handler: %v)", a.env.ID, err, r.err)
	}
	return r, nil
}

// observe logs and counts a committed attempt.
func (w *ProcessWorker) observe(ctx context.Context, a *attempt) {
	env, d := a.env, a.dec
	failed := a.res.kind == foundFailed
	lvl := slog.LevelDebug
	switch {
	case !failed:
		w.observeFinal(a)
	case d.final:
		lvl = slog.LevelError
	case d.cause != labels.CauseThrottled:
		lvl = slog.LevelWarn // a throttled wait stays DEBUG: the metric counts them, a flood would flood the log
	}
	if failed {
		w.observeFailure(a)
	}
	if !w.Logger.Enabled(ctx, lvl) {
		return
	}
	attrs := []any{"envelope_id", env.ID, "job_id", a.job.ID, "attempt", a.job.Attempt,
		"source", env.Source, "delivery_id", env.DeliveryID, "event_type", env.EventType}
	if !failed {
		// DEBUG: the envelope_attempt row is the record of every attempt.
		w.Logger.Log(ctx, lvl, "envelope processed", append(attrs, "outcome", d.label)...)
		return
	}
	w.Logger.Log(ctx, lvl, "envelope attempt failed", append(attrs, "outcome", string(d.outcome), "cause", string(d.cause), "error", d.reason)...)
}

// fence locks the jobs' rows and checks that each attempt still owns its
// job: a worker paused past the rescue horizon comes back to find its job
// rescued and run by a later attempt, and must then change nothing. Units
// that lost their job get errLostRace and are left alone.
func fence(ctx context.Context, tx pgx.Tx, atts []*attempt) error {
	var ids []int64
	for _, a := range atts {
		if !a.settled() {
			ids = append(ids, a.job.ID)
		}
	}
	if len(ids) == 0 {
		return nil
	}
	type row struct {
		state   string
		attempt int
	}
	rows, err := tx.Query(ctx, `SELECT id, state::text, attempt FROM river_job WHERE id = ANY($1) ORDER BY id FOR UPDATE`, pg.PlanEachCall, ids)
	if err != nil {
		return fmt.Errorf("lock %d jobs: %w", len(ids), err)
	}
	got := make(map[int64]row, len(ids))
	var id int64
	var r row
	if _, err := pgx.ForEachRow(rows, []any{&id, &r.state, &r.attempt}, func() error {
		got[id] = r
		return nil
	}); err != nil {
		return fmt.Errorf("lock %d jobs: %w", len(ids), err)
	}
	for _, a := range atts {
		if a.settled() {
			continue
		}
		r, ok := got[a.job.ID]
		switch {
		case !ok:
			a.settle(result{kind: foundLostRace, err: fmt.Errorf("job %d is gone: %w", a.job.ID, errLostRace)}, bounds{})
		case r.state != string(rivertype.JobStateRunning) || r.attempt != a.job.Attempt:
			a.settle(result{kind: foundLostRace, err: fmt.Errorf("job %d is %s at attempt %d, this is attempt %d: %w", a.job.ID, r.state, r.attempt, a.job.Attempt, errLostRace)}, bounds{})
		}
	}
	return nil
}

// logPanic logs where a handler panicked, when err is its panic.
func (w *ProcessWorker) logPanic(env *envelope.Envelope, err error) {
	var p *handlers.PanicError
	if errors.As(err, &p) {
		w.Logger.Error("handler panicked", "envelope", env.ID, "source", env.Source, "event_type", env.EventType,
			"panic", fmt.Sprint(p.Value), "stack", string(p.Stack))
	}
}

// Hostname-pid, for envelope_attempt.worker.
func DefaultName() string {
	h, _ := os.Hostname()
	return fmt.Sprintf("%s:%d", h, os.Getpid())
}

// throttle takes a slot for a's envelope when its source is throttled, at
// the moment the batch processes it (so the limit holds for processing
// times, however long the job waited for its batch), keyed on the locked
// row's merchant; a full window sets a.throttled. The slot is counted in a
// statement of its own on the pool, committed at once: a window's count is
// never held by a batch still running, and a batch that rolls back leaves
// its slots taken, which errs on the side of the limit.
func (w *ProcessWorker) throttle(ctx context.Context, a *attempt) error {
	sp, ok := w.Sources[a.env.Source]
	if !ok || sp.ThrottlePerSecond <= 0 || a.env.Status != envelope.StatusPending {
		return nil
	}
	key := a.env.Source
	if sp.ThrottleKey != "source" {
		key += "/" + handlers.Merchant(a.env, sp.AccountID)
	}
	wait, at, err := takeThrottleSlot(ctx, w.Pool, key, sp.ThrottlePerSecond)
	if err != nil {
		return err
	}
	a.startedAt = at // the window it counts in
	if wait == 0 {
		return nil
	}
	a.throttled = &throttledError{key: key, wait: wait, rate: sp.ThrottlePerSecond}
	return nil
}

// observeFinal records a committed attempt that did not fail in the
// metrics (one that found its envelope final already as unprocessed).
func (w *ProcessWorker) observeFinal(a *attempt) {
	if a.res.kind == foundFinal {
		w.observeUnprocessed(a) // an already-final envelope was not processed by this attempt
		return
	}
	if w.Metrics == nil {
		return
	}
	env := a.env
	w.Metrics.Attempts.WithLabelValues(env.Source, a.dec.label).Inc()
	w.Metrics.ObserveProcessing(env.Source, a.dec.label, env.ReceivedAt, env.LastReplayedAt, a.startedAt)
	if p := a.res.posting; p != nil && p.Kind != "" {
		w.Metrics.LedgerPostings.WithLabelValues(p.Kind, string(labels.PostingResultOf(p.Posted))).Inc()
	}
}

// observeUnprocessed counts a job that ran and processed nothing (not found,
// lost race, already final) under its decision's label
// (labels.UnprocessedReasons), and the envelope's source, as its attempts
// are counted; a job whose envelope is gone names its own.
func (w *ProcessWorker) observeUnprocessed(a *attempt) {
	if w.Metrics == nil {
		return
	}
	source := a.job.Args.Source
	if a.env != nil {
		source = a.env.Source
	}
	w.Metrics.Unprocessed.WithLabelValues(source, a.dec.label).Inc()
}

// observeFailure records a recorded failed attempt in the metrics.
func (w *ProcessWorker) observeFailure(a *attempt) {
	if w.Metrics == nil {
		return
	}
	env, d := a.env, a.dec
	w.Metrics.Attempts.WithLabelValues(env.Source, string(d.outcome)).Inc()
	w.Metrics.Failures.WithLabelValues(env.Source, string(d.cause), string(d.outcome)).Inc()
	switch {
	case d.final:
		w.Metrics.ObserveProcessing(env.Source, string(envelope.StatusFailed), env.ReceivedAt, env.LastReplayedAt, a.startedAt)
	case d.outcome == envelope.OutcomeSnoozed:
		w.Metrics.Snoozes.WithLabelValues(env.Source, string(d.snooze)).Inc()
	}
}
