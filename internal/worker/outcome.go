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

// action is what one failed attempt turns into.
type action struct {
	outcome envelope.Outcome // failed, retry or snoozed
	// final is true when the envelope leaves pending (status failed).
	final  bool
	reason string
	// cause is the failure's code, recorded next to reason (set by decide,
	// from failureCause): what went wrong; an exhausted or given-up
	// envelope keeps its last error's cause, outcome and reason say how it
	// ended.
	cause labels.Cause
	// riverErr is what Work returns to River.
	riverErr error
}

// outcome is the one place that maps a handler's error to River's action and
// the envelope's state:
//
//   - *handlers.PermanentError: the envelope fails with the reason and the
//     job is cancelled (river.JobCancel): never retried.
//   - *handlers.NotReadyError: the job snoozes (river.JobSnooze) for its Wait
//     or the default, using no attempt.
//   - *handlers.RetryAfterError: the job snoozes for After, capped at
//     maxSnooze.
//   - a throttle slot refused: the job snoozes to the key's next window.
//   - anything else: River retries with backoff; on the last attempt the
//     envelope fails with "attempts exhausted".
//
// Snoozing is bounded by the envelope's age: once age exceeds maxAge the
// envelope fails instead of waiting forever.
func outcome(err error, attempt, maxAttempts int, age time.Duration, p Policy) action {
	var perm *handlers.PermanentError
	if errors.As(err, &perm) {
		return action{outcome: envelope.OutcomeFailed, final: true, reason: "permanent: " + err.Error(), riverErr: river.JobCancel(err)}
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
			return action{outcome: envelope.OutcomeFailed, final: true, reason: reason, riverErr: river.JobCancel(errors.New(reason))}
		}
		return action{outcome: envelope.OutcomeSnoozed, reason: err.Error(), riverErr: river.JobSnooze(wait)}
	}
	if attempt >= maxAttempts {
		reason := fmt.Sprintf("attempts exhausted (%d of %d): %v", attempt, maxAttempts, err)
		return action{outcome: envelope.OutcomeFailed, final: true, reason: reason, riverErr: err}
	}
	return action{outcome: envelope.OutcomeRetry, reason: err.Error(), riverErr: err}
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
