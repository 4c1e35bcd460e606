package pgtest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

// PollInterval is how long Eventually waits between two calls of its
// condition.
const PollInterval = 10 * time.Millisecond

// Eventually calls cond until it reports done, waiting PollInterval between
// calls, and fails t (t.Fatalf) when timeout has passed and cond still does
// not hold. The failure names what was awaited, the timeout and cond's last
// state, the string it returned with false ("" when it has nothing to add):
//
//	timed out after 20s waiting for envelope 7 to leave pending; last state: pending, 2 attempts
//
// cond runs on the calling goroutine (unlike testify's require.Eventually,
// which runs it on another), so it may itself fail the test with require or
// t.Fatalf, for instance on a query error. It is called at least once, and
// once more after the deadline passed, so a condition met just in time is
// not a failure.
//
// Use it wherever a test waits for something another goroutine or process
// does; a fixed sleep where a condition can be awaited is a defect.
func Eventually(t testing.TB, timeout time.Duration, what string, cond func() (done bool, state string)) {
	t.Helper()
	EventuallyEvery(t, timeout, PollInterval, what, cond)
}

// EventuallyEvery is Eventually waiting interval between calls: shorter
// where a test must see a state that lasts only moments (a session waiting
// on a lock before its own timeout), longer where each call is expensive (a
// metrics scrape).
func EventuallyEvery(t testing.TB, timeout, interval time.Duration, what string, cond func() (done bool, state string)) {
	t.Helper()
	var state string
	err := Poll(context.Background(), timeout, interval, func() (bool, error) {
		var done bool
		done, state = cond()
		return done, nil
	})
	if err != nil {
		t.Fatalf("timed out after %s waiting for %s%s", timeout, what, lastState(state))
	}
}

// ErrTimedOut is what Poll returns, wrapped, when its condition did not hold
// in time.
var ErrTimedOut = errors.New("timed out")

// Poll is Eventually for a goroutine other than the test's, where failing
// the test is not allowed (t.Fatalf must run on the test's goroutine): it
// calls cond every interval until cond reports done (Poll returns nil) or
// an error (Poll returns it), ctx is done (Poll returns ctx.Err()), or
// timeout has passed (Poll returns an error wrapping ErrTimedOut). Like
// Eventually it calls cond at least once, unless ctx is done already, and
// once more after the deadline passed.
func Poll(ctx context.Context, timeout, interval time.Duration, cond func() (done bool, err error)) error {
	deadline := time.Now().Add(timeout)
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		done, err := cond()
		if err != nil {
			return err
		}
		if done {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%w after %s", ErrTimedOut, timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(interval):
		}
	}
}

// lastState formats the state a failed Eventually reports: on its own lines
// when it has several (a log, a list of differences).
func lastState(state string) string {
	switch {
	case state == "":
		return ""
	case strings.Contains(state, "\n"):
		return "; last state:\n" + state
	default:
		return "; last state: " + state
	}
}
