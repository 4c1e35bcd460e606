package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"

	"github.com/inboxhq/inbox/internal/envelope"
	"github.com/inboxhq/inbox/internal/handlers"
	"github.com/inboxhq/inbox/internal/metrics"
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

// ProcessWorker is the River worker for envelope.ProcessArgs.
type ProcessWorker struct {
	river.WorkerDefaults[envelope.ProcessArgs]

	Pool     *pgxpool.Pool
	Registry *handlers.Registry
	Policy   Policy
	Logger   *slog.Logger
	// Name identifies this process in envelope_attempt.worker.
	Name string
	// Sources holds per-source throttles (and backoff, applied by the
	// client's retry policy).
	Sources map[string]SourcePolicy
	// Metrics, when set, counts attempts, snoozes, latency and postings.
	Metrics *metrics.Worker
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

// Work processes one envelope. Effects, result, status and the job's
// completion commit together or not at all.
func (w *ProcessWorker) Work(ctx context.Context, job *river.Job[envelope.ProcessArgs]) error {
	id := job.Args.EnvelopeID
	log := w.Logger.With("envelope_id", id, "job_id", job.ID, "attempt", job.Attempt)
	start := time.Now()
	if env, terr := w.throttle(ctx, job); terr != nil {
		var throttled *throttledError
		if errors.As(terr, &throttled) {
			// Recorded and bounded like any snooze.
			return w.fail(ctx, job, env, throttled.at, terr, log)
		}
		if errors.Is(terr, envelope.ErrNotFound) {
			return river.JobCancel(terr)
		}
		return terr
	}

	var (
		env        *envelope.Envelope
		startedAt  time.Time
		handlerErr error
		outcomeLog string
		result     json.RawMessage
	)
	err := pgx.BeginFunc(ctx, w.Pool, func(tx pgx.Tx) error {
		var err error
		env, startedAt, err = envelope.Lock(ctx, tx, id)
		if err != nil {
			return err
		}
		if err := fence(ctx, tx, job); err != nil {
			return err
		}
		a := envelope.Attempt{JobID: job.ID, Attempt: job.Attempt, StartedAt: startedAt, Worker: w.Name}
		switch {
		case env.Status != envelope.StatusPending:
			// Already final (processed by an earlier attempt that committed,
			// or a replay's job raced): only the job needs completing.
			outcomeLog = "already_" + string(env.Status)
		default:
			h, ok := w.Registry.LookupEnvelope(env)
			if !ok {
				a.Outcome = envelope.OutcomeIgnored
				res, _ := json.Marshal(map[string]string{"reason": "no handler for " + env.Provider + " event " + env.EventType})
				if err := envelope.Finish(ctx, tx, id, envelope.StatusIgnored, res, a); err != nil {
					return err
				}
				outcomeLog = "ignored"
				break
			}
			result, err = runHandler(ctx, h, tx, env)
			if err != nil {
				handlerErr = err
				return err // roll back the handler's partial effects
			}
			a.Outcome = envelope.OutcomeDone
			if err := envelope.Finish(ctx, tx, id, envelope.StatusDone, result, a); err != nil {
				return err
			}
			outcomeLog = "done"
		}
		completed, err := river.JobCompleteTx[*riverpgxv5.Driver](ctx, tx, job)
		if err != nil {
			return fmt.Errorf("complete job %d: %w", job.ID, err)
		}
		if completed.State != rivertype.JobStateCompleted {
			return fmt.Errorf("complete job %d: state %s: %w", job.ID, completed.State, errLostRace)
		}
		return nil
	})
	if err == nil {
		log.Info("envelope processed", "source", env.Source, "delivery_id", env.DeliveryID,
			"event_type", env.EventType, "outcome", outcomeLog, "duration_ms", float64(time.Since(start).Microseconds())/1000)
		w.observeFinal(env, outcomeLog, startedAt, result)
		return nil
	}
	if handlerErr == nil || env == nil {
		// The database, the fence or the envelope's CAS failed: nothing was
		// committed; River retries (and a lost race finds the envelope final).
		log.Warn("envelope attempt rolled back", "error", err)
		if errors.Is(err, envelope.ErrNotFound) {
			return river.JobCancel(err) // nothing to process, ever
		}
		return err
	}
	return w.fail(ctx, job, env, startedAt, handlerErr, log)
}

// fail records a failed attempt and returns River's action for it.
func (w *ProcessWorker) fail(ctx context.Context, job *river.Job[envelope.ProcessArgs], env *envelope.Envelope, startedAt time.Time, handlerErr error, log *slog.Logger) error {
	maxAttempts := job.MaxAttempts
	if sp := w.Sources[env.Source]; sp.MaxAttempts > 0 && sp.MaxAttempts < maxAttempts {
		maxAttempts = sp.MaxAttempts
	}
	act := outcome(handlerErr, job.Attempt, maxAttempts, startedAt.Sub(env.WaitingSince()), w.policyFor(env))
	if act.final && job.Attempt < job.MaxAttempts {
		// Final before River's own limit: make sure River stops too.
		act.riverErr = river.JobCancel(errors.New(act.reason))
	}
	a := envelope.Attempt{JobID: job.ID, Attempt: job.Attempt, Outcome: act.outcome, Error: act.reason, StartedAt: startedAt, Worker: w.Name}
	// The attempt's own transaction may have died with the context; record
	// with a fresh bound so the audit trail survives a job timeout.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	err := pgx.BeginFunc(rctx, w.Pool, func(tx pgx.Tx) error {
		if err := fence(rctx, tx, job); err != nil {
			return err
		}
		if act.final {
			return envelope.Finish(rctx, tx, env.ID, envelope.StatusFailed, nil, a)
		}
		_, err := envelope.RecordAttempt(rctx, tx, env.ID, a)
		return err
	})
	if err == nil {
		w.observeFailure(env, act, startedAt, handlerErr)
	}
	lvl := slog.LevelWarn
	if act.final {
		lvl = slog.LevelError
	} else if errors.As(handlerErr, new(*throttledError)) {
		lvl = slog.LevelDebug // the metric counts them; a flood would flood the log
	}
	log.Log(ctx, lvl, "envelope attempt failed", "source", env.Source, "delivery_id", env.DeliveryID,
		"event_type", env.EventType, "outcome", string(act.outcome), "error", act.reason)
	if err != nil {
		// The outcome is not recorded, so River must not take the action
		// (a cancel or snooze would leave the envelope pending with no
		// reason): a plain error retries the attempt and decides again.
		log.Error("record attempt", "error", err)
		return fmt.Errorf("record outcome of envelope %d: %w (handler: %v)", env.ID, err, handlerErr)
	}
	return act.riverErr
}

// fence locks the job's row and checks that this attempt still owns it: a
// worker paused past the rescue horizon comes back to find its job rescued
// and run by a later attempt, and must then change nothing. JobCompleteTx
// checks only that the row is running, not which attempt runs it.
func fence(ctx context.Context, tx pgx.Tx, job *river.Job[envelope.ProcessArgs]) error {
	var state string
	var attempt int
	err := tx.QueryRow(ctx, `SELECT state::text, attempt FROM river_job WHERE id = $1 FOR UPDATE`, job.ID).Scan(&state, &attempt)
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("job %d is gone: %w", job.ID, errLostRace)
	}
	if err != nil {
		return fmt.Errorf("lock job %d: %w", job.ID, err)
	}
	if state != string(rivertype.JobStateRunning) || attempt != job.Attempt {
		return fmt.Errorf("job %d is %s at attempt %d, this is attempt %d: %w", job.ID, state, attempt, job.Attempt, errLostRace)
	}
	return nil
}

// runHandler calls h, turning a panic into an error so the attempt is
// recorded like any other failure.
func runHandler(ctx context.Context, h handlers.Handler, tx pgx.Tx, env *envelope.Envelope) (res json.RawMessage, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("handler panic: %v", r)
		}
	}()
	return h.Handle(ctx, tx, env)
}

// Hostname-pid, for envelope_attempt.worker.
func DefaultName() string {
	h, _ := os.Hostname()
	return fmt.Sprintf("%s:%d", h, os.Getpid())
}

// throttle takes a slot for the envelope's throttle key when its source is
// throttled. When the current window is full it returns a *throttledError
// and the envelope (for the audit trail and the age bound).
func (w *ProcessWorker) throttle(ctx context.Context, job *river.Job[envelope.ProcessArgs]) (*envelope.Envelope, error) {
	sp, ok := w.Sources[job.Args.Source]
	if !ok || sp.ThrottlePerSecond <= 0 {
		return nil, nil
	}
	env, err := envelope.Get(ctx, w.Pool, job.Args.EnvelopeID)
	if err != nil {
		return nil, err
	}
	if env.Status != envelope.StatusPending {
		return nil, nil // nothing to process; let Work complete the job
	}
	key := job.Args.Source
	if sp.ThrottleKey != "source" {
		key += "/" + handlers.Merchant(env)
	}
	wait, at, err := takeThrottleSlot(ctx, w.Pool, key, sp.ThrottlePerSecond)
	if err != nil || wait == 0 {
		return nil, err
	}
	return env, &throttledError{key: key, wait: wait, rate: sp.ThrottlePerSecond, at: at}
}

func (w *ProcessWorker) countSnooze(source, cause string) {
	if w.Metrics != nil {
		w.Metrics.Snoozes.WithLabelValues(source, cause).Inc()
	}
}

// observeFinal records a committed attempt in the metrics.
func (w *ProcessWorker) observeFinal(env *envelope.Envelope, outcome string, at time.Time, result json.RawMessage) {
	if w.Metrics == nil || env.Status != envelope.StatusPending {
		return // an already-final envelope was not processed by this attempt
	}
	w.Metrics.Attempts.WithLabelValues(env.Source, outcome).Inc()
	w.Metrics.ProcessingLatency.WithLabelValues(env.Source, outcome).Observe(at.Sub(env.ReceivedAt).Seconds())
	var r struct {
		Posted *bool  `json:"posted"`
		Kind   string `json:"kind"`
	}
	if json.Unmarshal(result, &r) == nil && r.Posted != nil && r.Kind != "" {
		res := "posted"
		if !*r.Posted {
			res = "skipped"
		}
		w.Metrics.LedgerPostings.WithLabelValues(r.Kind, res).Inc()
	}
}

// observeFailure records a recorded failed attempt in the metrics.
func (w *ProcessWorker) observeFailure(env *envelope.Envelope, act action, at time.Time, err error) {
	if w.Metrics == nil {
		return
	}
	w.Metrics.Attempts.WithLabelValues(env.Source, string(act.outcome)).Inc()
	switch {
	case act.final:
		w.Metrics.ProcessingLatency.WithLabelValues(env.Source, string(envelope.StatusFailed)).Observe(at.Sub(env.ReceivedAt).Seconds())
	case act.outcome == envelope.OutcomeSnoozed:
		cause := "not_ready"
		var ra *handlers.RetryAfterError
		var th *throttledError
		switch {
		case errors.As(err, &ra):
			cause = "retry_after"
		case errors.As(err, &th):
			cause = "throttled"
		}
		w.countSnooze(env.Source, cause)
	}
}
