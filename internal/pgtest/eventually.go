package pgtest

import (
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
	deadline := time.Now().Add(timeout)
	for {
		done, state := cond()
		if done {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s%s", timeout, what, lastState(state))
		}
		time.Sleep(interval)
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
