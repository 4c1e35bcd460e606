package pgtest_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/inboxhq/inbox/internal/pgtest"
)

// recorder is a testing.TB that records a Fatalf instead of ending the test.
type recorder struct {
	testing.TB
	failed string
}

func (r *recorder) Helper() {}

func (r *recorder) Fatalf(format string, args ...any) {
	r.failed = fmt.Sprintf(format, args...)
	panic(r)
}

// run calls f with a recorder and returns what it failed with ("" when it
// did not).
func run(t *testing.T, f func(tb testing.TB)) (failed string) {
	t.Helper()
	r := &recorder{TB: t}
	defer func() {
		if p := recover(); p != nil && p != any(r) {
			panic(p)
		}
		failed = r.failed
	}()
	f(r)
	return ""
}

func TestEventuallyReturnsOnceTheConditionHolds(t *testing.T) {
	t.Parallel()
	calls := 0
	failed := run(t, func(tb testing.TB) {
		pgtest.Eventually(tb, 5*time.Second, "three calls", func() (bool, string) {
			calls++
			return calls == 3, fmt.Sprint(calls)
		})
	})
	require.Empty(t, failed)
	require.Equal(t, 3, calls)
}

func TestEventuallyFailsWithWhatAndTheLastState(t *testing.T) {
	t.Parallel()
	calls := 0
	start := time.Now()
	failed := run(t, func(tb testing.TB) {
		pgtest.EventuallyEvery(tb, 50*time.Millisecond, time.Millisecond, "the impossible", func() (bool, string) {
			calls++
			return false, fmt.Sprintf("call %d", calls)
		})
	})
	require.GreaterOrEqual(t, time.Since(start), 50*time.Millisecond)
	require.Greater(t, calls, 1)
	require.Equal(t, fmt.Sprintf("timed out after 50ms waiting for the impossible; last state: call %d", calls), failed)

	failed = run(t, func(tb testing.TB) {
		pgtest.Eventually(tb, time.Millisecond, "a log line", func() (bool, string) { return false, "line 1\nline 2" })
	})
	require.Equal(t, "timed out after 1ms waiting for a log line; last state:\nline 1\nline 2", failed)

	failed = run(t, func(tb testing.TB) {
		pgtest.Eventually(tb, time.Millisecond, "nothing", func() (bool, string) { return false, "" })
	})
	require.True(t, strings.HasSuffix(failed, "waiting for nothing"), failed)
}

func TestPollReturnsInsteadOfFailing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	calls := 0
	require.NoError(t, pgtest.Poll(ctx, 5*time.Second, time.Millisecond, func() (bool, error) {
		calls++
		return calls == 3, nil
	}))
	require.Equal(t, 3, calls)

	calls = 0
	start := time.Now()
	err := pgtest.Poll(ctx, 20*time.Millisecond, time.Millisecond, func() (bool, error) {
		calls++
		return false, nil
	})
	require.ErrorIs(t, err, pgtest.ErrTimedOut)
	require.EqualError(t, err, "timed out after 20ms")
	require.GreaterOrEqual(t, time.Since(start), 20*time.Millisecond)
	require.Greater(t, calls, 1, "called again after the deadline")

	boom := errors.New("boom")
	calls = 0
	err = pgtest.Poll(ctx, 5*time.Second, time.Millisecond, func() (bool, error) {
		calls++
		return false, boom
	})
	require.ErrorIs(t, err, boom)
	require.Equal(t, 1, calls, "an error ends the polling")

	cctx, cancel := context.WithCancel(ctx)
	calls = 0
	err = pgtest.Poll(cctx, time.Minute, time.Millisecond, func() (bool, error) {
		calls++
		if calls == 2 {
			cancel()
		}
		return false, nil
	})
	require.ErrorIs(t, err, context.Canceled)
	require.Equal(t, 2, calls)
	require.ErrorIs(t, pgtest.Poll(cctx, time.Minute, time.Millisecond, func() (bool, error) {
		t.Error("cond called after ctx was done")
		return true, nil
	}), context.Canceled)
}
