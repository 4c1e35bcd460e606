package worker

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/inboxhq/inbox/internal/envelope"
	"github.com/inboxhq/inbox/internal/handlers"
	"github.com/inboxhq/inbox/internal/labels"
	"github.com/inboxhq/inbox/internal/ledger"
)

// river's action, as the table states it.
const (
	cancel = "cancel"
	snooze = "snooze"
	plain  = "plain" // the error itself: River retries with backoff or discards at its limit
	// complete: nil, the job is deleted in the batch's transaction.
	complete = "complete"
)

// Every branch of decide for a failed attempt, with River's limit the only
// one (the source sets none): the one place that maps a failed attempt to
// River's action and the envelope's state.
func TestOutcomeMapsEveryErrorToItsAction(t *testing.T) {
	t.Parallel()
	p := Policy{SnoozeDefault: 10 * time.Second, MaxSnooze: 15 * time.Minute, MaxAge: 24 * time.Hour}
	hiccup := errors.New("downstream hiccup")
	perm := &handlers.PermanentError{Err: errors.New("unknown currency XYZ")}
	cases := []struct {
		name                 string
		err                  error
		attempt, maxAttempts int
		age                  time.Duration
		outcome              envelope.Outcome
		final                bool
		river                string
		wait                 time.Duration // for snooze
		reason               string        // a prefix
	}{
		{"permanent", perm, 1, 25, 0, envelope.OutcomeFailed, true, cancel, 0, "permanent: unknown currency XYZ"},
		{"permanent, wrapped", fmt.Errorf("post: %w", perm), 1, 25, 0, envelope.OutcomeFailed, true, cancel, 0, "permanent: post: unknown currency XYZ"},
		{"permanent on the last attempt", perm, 25, 25, 0, envelope.OutcomeFailed, true, cancel, 0, "permanent: "},
		{"not ready, default wait", &handlers.NotReadyError{Err: errors.New("no payment yet")}, 1, 25, time.Minute, envelope.OutcomeSnoozed, false, snooze, 10 * time.Second, "no payment yet"},
		{"not ready, explicit wait", &handlers.NotReadyError{Err: errors.New("no payment yet"), Wait: 3 * time.Second}, 1, 25, 0, envelope.OutcomeSnoozed, false, snooze, 3 * time.Second, "no payment yet"},
		{"not ready, wrapped", fmt.Errorf("refund: %w", &handlers.NotReadyError{Err: errors.New("no payment yet")}), 1, 25, 0, envelope.OutcomeSnoozed, false, snooze, 10 * time.Second, "refund: no payment yet"},
		{"not ready on the last attempt snoozes (a snooze uses no attempt)", &handlers.NotReadyError{Err: errors.New("no payment yet")}, 25, 25, 0, envelope.OutcomeSnoozed, false, snooze, 10 * time.Second, ""},
		{"retry-after", &handlers.RetryAfterError{Err: errors.New("503"), After: 30 * time.Second}, 1, 25, 0, envelope.OutcomeSnoozed, false, snooze, 30 * time.Second, "503"},
		{"retry-after zero takes the default", &handlers.RetryAfterError{Err: errors.New("503")}, 1, 25, 0, envelope.OutcomeSnoozed, false, snooze, 10 * time.Second, "503"},
		{"retry-after capped at MaxSnooze", &handlers.RetryAfterError{Err: errors.New("503"), After: 2 * time.Hour}, 1, 25, 0, envelope.OutcomeSnoozed, false, snooze, 15 * time.Minute, "503"},
		{"not ready capped at MaxSnooze", &handlers.NotReadyError{Err: errors.New("later"), Wait: time.Hour}, 1, 25, 0, envelope.OutcomeSnoozed, false, snooze, 15 * time.Minute, "later"},
		{"throttled", &throttledError{key: "src/m", wait: 700 * time.Millisecond, rate: 3}, 1, 25, 0, envelope.OutcomeSnoozed, false, snooze, 700 * time.Millisecond, "throttled: src/m is over 3/s"},
		{"throttled capped at MaxSnooze", &throttledError{key: "src/m", wait: time.Hour, rate: 3}, 1, 25, 0, envelope.OutcomeSnoozed, false, snooze, 15 * time.Minute, "throttled"},
		// A not-ready wait grows with the time waited (a tenth of it), capped at MaxSnooze.
		{"snooze up to the age bound exactly", &handlers.NotReadyError{Err: errors.New("later")}, 1, 25, 24*time.Hour - 15*time.Minute, envelope.OutcomeSnoozed, false, snooze, 15 * time.Minute, "later"},
		{"snooze past the age bound fails", &handlers.NotReadyError{Err: errors.New("later")}, 1, 25, 24*time.Hour - 15*time.Minute + time.Second, envelope.OutcomeFailed, true, cancel, 0, "gave up waiting: envelope older than 24h0m0s: later"},
		{"retry-after past the age bound fails", &handlers.RetryAfterError{Err: errors.New("503"), After: time.Minute}, 1, 25, 24 * time.Hour, envelope.OutcomeFailed, true, cancel, 0, "gave up waiting"},
		{"throttled past the age bound fails", &throttledError{key: "src", wait: time.Second, rate: 1}, 1, 25, 25 * time.Hour, envelope.OutcomeFailed, true, cancel, 0, "gave up waiting"},
		// The cap applies before the age bound: a 2 h Retry-After waits 15 min when 15 min are left.
		{"capped wait within the age bound", &handlers.RetryAfterError{Err: errors.New("503"), After: 2 * time.Hour}, 1, 25, 23*time.Hour + 45*time.Minute, envelope.OutcomeSnoozed, false, snooze, 15 * time.Minute, "503"},
		{"capped wait past the age bound", &handlers.RetryAfterError{Err: errors.New("503"), After: 2 * time.Hour}, 1, 25, 23*time.Hour + 46*time.Minute, envelope.OutcomeFailed, true, cancel, 0, "gave up waiting"},
		{"transient retries", hiccup, 1, 25, 0, envelope.OutcomeRetry, false, plain, 0, "downstream hiccup"},
		{"transient, old envelope still retries (the age bounds snoozes only)", hiccup, 2, 25, 48 * time.Hour, envelope.OutcomeRetry, false, plain, 0, "downstream hiccup"},
		{"transient before the last attempt", hiccup, 2, 3, 0, envelope.OutcomeRetry, false, plain, 0, "downstream hiccup"},
		{"transient on the last attempt: exhausted", hiccup, 3, 3, 0, envelope.OutcomeFailed, true, plain, 0, "attempts exhausted (3 of 3): downstream hiccup"},
		{"transient past a lower limit: exhausted", hiccup, 4, 2, 0, envelope.OutcomeFailed, true, plain, 0, "attempts exhausted (4 of 2)"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			act := decideFailure(tc.err, tc.attempt, tc.maxAttempts, tc.age, p)
			require.Equal(t, tc.outcome, act.outcome)
			require.Equal(t, tc.final, act.final)
			status := envelope.StatusPending
			if tc.final {
				status = envelope.StatusFailed
			}
			require.Equal(t, status, act.status)
			require.Equal(t, string(tc.outcome), act.label)
			require.Truef(t, strings.HasPrefix(act.reason, tc.reason), "reason %q does not start with %q", act.reason, tc.reason)
			requireRiver(t, tc.river, tc.wait, tc.err, act.river)
		})
	}
}

// decideFailure is decide for a failed attempt with River's limit
// maxAttempts and no limit of the source's.
func decideFailure(err error, attempt, maxAttempts int, age time.Duration, p Policy) decision {
	return decide(result{kind: foundFailed, err: err}, bounds{attempt: attempt, riverMax: maxAttempts, age: age, policy: p})
}

// requireRiver checks River's action: kind (cancel, snooze for wait, plain
// err, or complete: nil).
func requireRiver(t *testing.T, kind string, wait time.Duration, err, got error) {
	t.Helper()
	var snoozeErr *river.JobSnoozeError
	var cancelErr *rivertype.JobCancelError
	switch kind {
	case snooze:
		require.ErrorAs(t, got, &snoozeErr)
		require.Equal(t, wait, snoozeErr.Duration)
	case cancel:
		require.ErrorAs(t, got, &cancelErr)
		require.False(t, errors.As(got, &snoozeErr))
	case plain:
		require.Same(t, err, got, "a transient error goes to River as is")
	case complete:
		require.NoError(t, got, "the job is deleted in the batch's transaction")
	default:
		t.Fatalf("unknown River action %q", kind)
	}
}

// Every kind of result decide maps, with the source's limit against River's
// (the job's max_attempts), the snooze kinds the metrics count and the
// causes recorded.
func TestDecideMapsEveryResultToItsAction(t *testing.T) {
	t.Parallel()
	p := Policy{SnoozeDefault: 10 * time.Second, MaxSnooze: 15 * time.Minute, MaxAge: 24 * time.Hour}
	hiccup := errors.New("downstream hiccup")
	gone := fmt.Errorf("envelope 7: %w", envelope.ErrNotFound)
	lost := fmt.Errorf("job 9 is gone: %w", errLostRace)
	notReady := &handlers.NotReadyError{Err: errors.New("no payment yet")}
	cases := []struct {
		name    string
		r       result
		b       bounds
		outcome envelope.Outcome // "": nothing recorded
		status  envelope.Status
		final   bool
		river   string
		wait    time.Duration
		reason  string // a prefix
		cause   labels.Cause
		snooze  labels.Cause
		label   string
	}{
		{"not found: cancelled, nothing recorded", result{kind: foundNotFound, err: gone}, bounds{}, "", "", false, cancel, 0, "", "", "", "not_found"},
		{"lost race: the error to River, nothing recorded", result{kind: foundLostRace, err: lost}, bounds{}, "", "", false, plain, 0, "", "", "", "lost_race"},
		{"already done: job deleted, nothing recorded", result{kind: foundFinal, status: envelope.StatusDone}, bounds{}, "", "", false, complete, 0, "", "", "", "already_done"},
		{"already failed: job deleted, nothing recorded", result{kind: foundFinal, status: envelope.StatusFailed}, bounds{}, "", "", false, complete, 0, "", "", "", "already_failed"},
		{"done", result{kind: foundDone, value: []byte(`{}`)}, bounds{attempt: 25, riverMax: 25, sourceMax: 2}, envelope.OutcomeDone, envelope.StatusDone, false, complete, 0, "", "", "", "done"},
		{"ignored", result{kind: foundIgnored, value: []byte(`{}`)}, bounds{attempt: 1, riverMax: 25}, envelope.OutcomeIgnored, envelope.StatusIgnored, false, complete, 0, "", "", "", "ignored"},
		{"permanent", result{kind: foundFailed, err: &handlers.PermanentError{Err: errors.New("bad")}}, bounds{attempt: 1, riverMax: 25, policy: p}, envelope.OutcomeFailed, envelope.StatusFailed, true, cancel, 0, "permanent: bad", labels.CausePermanent, "", "failed"},
		{"retry", result{kind: foundFailed, err: hiccup}, bounds{attempt: 1, riverMax: 25, sourceMax: 2, policy: p}, envelope.OutcomeRetry, envelope.StatusPending, false, plain, 0, "downstream hiccup", labels.CauseInternal, "", "retry"},
		{"exhausted at the source's limit, below River's: cancelled", result{kind: foundFailed, err: hiccup}, bounds{attempt: 2, riverMax: 25, sourceMax: 2, policy: p}, envelope.OutcomeFailed, envelope.StatusFailed, true, cancel, 0, "attempts exhausted (2 of 2): downstream hiccup", labels.CauseInternal, "", "failed"},
		{"exhausted at River's last attempt: River discards", result{kind: foundFailed, err: hiccup}, bounds{attempt: 3, riverMax: 3, sourceMax: 3, policy: p}, envelope.OutcomeFailed, envelope.StatusFailed, true, plain, 0, "attempts exhausted (3 of 3)", labels.CauseInternal, "", "failed"},
		{"a source's limit above River's: River's applies", result{kind: foundFailed, err: hiccup}, bounds{attempt: 3, riverMax: 3, sourceMax: 10, policy: p}, envelope.OutcomeFailed, envelope.StatusFailed, true, plain, 0, "attempts exhausted (3 of 3)", labels.CauseInternal, "", "failed"},
		{"a source's limit above River's: retried before River's", result{kind: foundFailed, err: hiccup}, bounds{attempt: 2, riverMax: 3, sourceMax: 10, policy: p}, envelope.OutcomeRetry, envelope.StatusPending, false, plain, 0, "downstream hiccup", labels.CauseInternal, "", "retry"},
		{"not ready on the source's last attempt snoozes", result{kind: foundFailed, err: notReady}, bounds{attempt: 2, riverMax: 25, sourceMax: 2, policy: p}, envelope.OutcomeSnoozed, envelope.StatusPending, false, snooze, 10 * time.Second, "no payment yet", labels.CauseNotReady, labels.CauseNotReady, "snoozed"},
		{"not ready waits a tenth of its age", result{kind: foundFailed, err: notReady}, bounds{attempt: 1, riverMax: 25, age: time.Hour, policy: p}, envelope.OutcomeSnoozed, envelope.StatusPending, false, snooze, 6 * time.Minute, "no payment yet", labels.CauseNotReady, labels.CauseNotReady, "snoozed"},
		{"a refund before its payment snoozes under the attempt's cause", result{kind: foundFailed, err: handlers.NotReady(fmt.Errorf("refund re_1: %w", ledger.ErrPaymentNotPosted))}, bounds{attempt: 1, riverMax: 25, policy: p}, envelope.OutcomeSnoozed, envelope.StatusPending, false, snooze, 10 * time.Second, "refund re_1: payment not posted", labels.CausePaymentNotPosted, labels.CausePaymentNotPosted, "snoozed"},
		{"retry-after capped", result{kind: foundFailed, err: &handlers.RetryAfterError{Err: errors.New("503"), After: time.Hour}}, bounds{attempt: 1, riverMax: 25, policy: p}, envelope.OutcomeSnoozed, envelope.StatusPending, false, snooze, 15 * time.Minute, "503", labels.CauseRetryAfter, labels.CauseRetryAfter, "snoozed"},
		{"throttled", result{kind: foundFailed, err: &throttledError{key: "src/m", wait: time.Second, rate: 2}}, bounds{attempt: 1, riverMax: 25, policy: p}, envelope.OutcomeSnoozed, envelope.StatusPending, false, snooze, time.Second, "throttled: src/m is over 2/s", labels.CauseThrottled, labels.CauseThrottled, "snoozed"},
		{"snooze past the age bound on River's last attempt: cancelled", result{kind: foundFailed, err: notReady}, bounds{attempt: 25, riverMax: 25, age: 24 * time.Hour, policy: p}, envelope.OutcomeFailed, envelope.StatusFailed, true, cancel, 0, "gave up waiting: envelope older than 24h0m0s: no payment yet", labels.CauseNotReady, "", "failed"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d := decide(tc.r, tc.b)
			require.Equal(t, tc.outcome, d.outcome)
			require.Equal(t, tc.outcome != "", d.recorded())
			require.Equal(t, tc.status, d.status)
			require.Equal(t, tc.final, d.final)
			require.Truef(t, strings.HasPrefix(d.reason, tc.reason), "reason %q does not start with %q", d.reason, tc.reason)
			require.Equal(t, tc.cause, d.cause)
			require.Equal(t, tc.snooze, d.snooze)
			require.Equal(t, tc.label, d.label)
			requireRiver(t, tc.river, tc.wait, tc.r.err, d.river)
		})
	}
}
