package worker

import (
	"errors"
	"fmt"
	"time"

	"github.com/riverqueue/river"

	"github.com/inboxhq/inbox/internal/envelope"
	"github.com/inboxhq/inbox/internal/handlers"
	"github.com/inboxhq/inbox/internal/labels"
)

// found is what kind of thing one attempt found or did.
type found int

// The kinds of an attempt's result.
const (
	// foundNothing: the attempt has no result yet.
	foundNothing found = iota
	// foundNotFound: the envelope is gone (deleted by retention).
	foundNotFound
	// foundLostRace: another attempt of the job owns it now (this one was
	// rescued as stuck and re-run elsewhere).
	foundLostRace
	// foundFinal: the envelope was already final (processed by an earlier
	// attempt that committed, or a replay's job raced).
	foundFinal
	// foundIgnored: no handler for the envelope's (provider, event type).
	foundIgnored
	// foundDone: the handler succeeded.
	foundDone
	// foundFailed: the handler failed, or the throttle refused a slot.
	foundFailed
)

// result is one attempt's typed result: what it found or what its handler
// did, before anything is decided about it (decide).
type result struct {
	kind found
	// err is the error of not found, lost race and failed.
	err error
	// status is the envelope's status when it was already final.
	status envelope.Status
	// value is the result to record: the handler's (done) or the reason
	// (ignored).
	value []byte
	// posting is the ledger posting the handler's result states (done), for
	// the metrics; nil when it states none.
	posting *handlers.PostingResult
}

// bounds are what decide needs to know of the attempt besides its result.
type bounds struct {
	// attempt is the attempt's number (River's, from 1).
	attempt int
	// riverMax is the job's max_attempts: River's own limit, past which it
	// discards the job when Work returns an error.
	riverMax int
	// sourceMax is the source's max_attempts; 0 when it sets none.
	sourceMax int
	// age is how long the envelope has waited, at the attempt's start.
	age time.Duration
	// policy is the worker's, with the source's and provider's MaxAge.
	policy Policy
}

// decision is what one attempt turns into: the attempt row and envelope
// status to record (none when outcome is empty) and River's action.
type decision struct {
	// outcome is the attempt's recorded outcome; empty when nothing is
	// recorded (not found, lost race, already final).
	outcome envelope.Outcome
	// status is the envelope's status after the attempt, when recorded.
	status envelope.Status
	// final is true when a failed attempt moves the envelope out of pending
	// (status failed).
	final bool
	// reason is the recorded error of a failed attempt.
	reason string
	// cause is a failed attempt's code, recorded next to reason (from
	// failureCause): what went wrong; an exhausted or given-up envelope
	// keeps its last error's cause, outcome and reason say how it ended.
	cause labels.Cause
	// snooze is what a snoozed attempt waits for (not ready, retry-after,
	// throttled), for the metrics.
	snooze labels.Cause
	// river is what Work returns to River: nil when the job is deleted
	// in the batch's transaction.
	river error
	// label names what happened, for the log, the span and the metrics.
	label string
}

// recorded reports whether the attempt writes an attempt row.
func (d decision) recorded() bool { return d.outcome != "" }

// decide is the worker's one decision: it maps an attempt's result to River's
// action and the envelope's status. It is pure.
//
//   - not found: nothing recorded; the job is cancelled (river.JobCancel).
//   - lost race: nothing recorded (the transaction changed nothing of it);
//     the error goes to River, whose own state for the job is the later
//     attempt's.
//   - already final: nothing recorded; the job is deleted.
//   - done, ignored: the envelope is done or ignored with the result; the
//     job is deleted.
//   - *handlers.PermanentError: the envelope fails with the reason and the
//     job is cancelled: never retried.
//   - *handlers.NotReadyError: the job snoozes (river.JobSnooze) for its Wait,
//     or a tenth of the time waited so far, at least the default, using no
//     attempt.
//   - *handlers.RetryAfterError: the job snoozes for After (the default when
//     it names none).
//   - a throttle slot refused: the job snoozes to the key's next window.
//   - anything else: River retries with backoff; on the attempt limit (the
//     source's max_attempts when lower than the job's) the envelope fails
//     "attempts exhausted".
//
// A snooze waits at most MaxSnooze, and is bounded by the envelope's age:
// once age plus the wait exceeds MaxAge the envelope fails "gave up
// waiting" instead. A failure that is final before River's own limit
// (riverMax) cancels the job, so that River stops too; on River's last
// attempt the error goes to River, which discards the job.
func decide(r result, b bounds) decision {
	switch r.kind {
	case foundNotFound:
		return decision{river: river.JobCancel(r.err), label: string(labels.UnprocessedNotFound)}
	case foundLostRace:
		return decision{river: r.err, label: string(labels.UnprocessedLostRace)}
	case foundFinal:
		return decision{label: string(labels.AlreadyFinal(string(r.status)))}
	case foundIgnored:
		return decision{outcome: envelope.OutcomeIgnored, status: envelope.StatusIgnored, label: "ignored"}
	case foundDone:
		return decision{outcome: envelope.OutcomeDone, status: envelope.StatusDone, label: "done"}
	case foundFailed:
	default:
		panic(fmt.Sprintf("worker: decide: result kind %d", r.kind))
	}
	limit := b.riverMax
	if b.sourceMax > 0 && b.sourceMax < limit {
		limit = b.sourceMax
	}
	d := failure(r.err, b.attempt, limit, b.age, b.policy)
	d.cause = failureCause(r.err)
	d.status = envelope.StatusPending
	if d.final {
		d.status = envelope.StatusFailed
		if b.attempt < b.riverMax {
			// Final before River's own limit: make sure River stops too.
			d.river = river.JobCancel(errors.New(d.reason))
		}
	}
	d.label = string(d.outcome)
	return d
}

// failure is decide's part for a failed attempt, with limit the attempt
// limit that applies (see decide).
func failure(err error, attempt, limit int, age time.Duration, p Policy) decision {
	var perm *handlers.PermanentError
	if errors.As(err, &perm) {
		return decision{outcome: envelope.OutcomeFailed, final: true, reason: "permanent: " + err.Error(), river: river.JobCancel(err)}
	}
	wait, snooze := time.Duration(0), false
	var notReady *handlers.NotReadyError
	var retryAfter *handlers.RetryAfterError
	var throttled *throttledError
	switch {
	case errors.As(err, &throttled):
		wait, snooze = throttled.wait, true
	case errors.As(err, &notReady):
		wait, snooze = notReady.Wait, true
		if wait <= 0 {
			// A tenth of the time waited so far, at least the default: a
			// refund waiting days for its payment (Stripe retries for 3)
			// wakes a few hundred times, not every 10 s.
			wait = max(p.SnoozeDefault, age/10)
		}
	case errors.As(err, &retryAfter):
		wait, snooze = retryAfter.After, true
		if wait <= 0 {
			wait = p.SnoozeDefault
		}
	}
	if snooze {
		if wait > p.MaxSnooze {
			wait = p.MaxSnooze
		}
		if age+wait > p.MaxAge {
			reason := "gave up waiting: envelope older than " + p.MaxAge.String() + ": " + err.Error()
			return decision{outcome: envelope.OutcomeFailed, final: true, reason: reason, river: river.JobCancel(errors.New(reason))}
		}
		// Named as the attempt's cause, one name everywhere: a refund
		// waiting for its payment is payment_not_posted in the metric as on
		// the attempt (not_ready is a dependency the handler did not name).
		return decision{outcome: envelope.OutcomeSnoozed, reason: err.Error(), snooze: failureCause(err), river: river.JobSnooze(wait)}
	}
	if attempt >= limit {
		reason := fmt.Sprintf("attempts exhausted (%d of %d): %v", attempt, limit, err)
		return decision{outcome: envelope.OutcomeFailed, final: true, reason: reason, river: err}
	}
	return decision{outcome: envelope.OutcomeRetry, reason: err.Error(), river: err}
}

// failureCause is the cause recorded for a failed attempt's err:
// handlers.CauseOf, and throttled for a throttle slot refused. A code not in
// labels.Causes (a handler's own) is recorded as internal: the set stays
// closed, for the metric's cardinality and the column's CHECK, which would
// otherwise fail the batch's statement.
func failureCause(err error) labels.Cause {
	if errors.As(err, new(*throttledError)) {
		return labels.CauseThrottled
	}
	if c := handlers.CauseOf(err); labels.KnownCause(c) {
		return c
	}
	return labels.CauseInternal
}
