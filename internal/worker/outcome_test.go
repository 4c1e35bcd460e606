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
)

// river's action, as the table states it.
const (
	cancel = "cancel"
	snooze = "snooze"
	plain  = "plain" // the error itself: River retries with backoff or discards at its limit
)

// Every branch of outcome, the one place that maps a failed attempt to
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
			act := outcome(tc.err, tc.attempt, tc.maxAttempts, tc.age, p)
			require.Equal(t, tc.outcome, act.outcome)
			require.Equal(t, tc.final, act.final)
			require.Truef(t, strings.HasPrefix(act.reason, tc.reason), "reason %q does not start with %q", act.reason, tc.reason)
			var snoozeErr *river.JobSnoozeError
			var cancelErr *rivertype.JobCancelError
			switch tc.river {
			case snooze:
				require.ErrorAs(t, act.riverErr, &snoozeErr)
				require.Equal(t, tc.wait, snoozeErr.Duration)
			case cancel:
				require.ErrorAs(t, act.riverErr, &cancelErr)
				require.False(t, errors.As(act.riverErr, &snoozeErr))
			case plain:
				require.Same(t, tc.err, act.riverErr, "a transient error goes to River as is")
			}
		})
	}
}
