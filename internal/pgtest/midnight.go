package pgtest

import (
	"testing"
	"time"

	"github.com/inboxhq/inbox/internal/pg"
)

// AwayFromMidnight returns at once unless the database's day ends within
// margin (its session time zone's day, or the UTC day: partitions and
// windows are UTC days), and then waits until that day has ended. A test
// that seeds data relative to today (a "yesterday" at fixed hours, a
// window of whole days) and reads it back through code that reads the
// clock again is then not cut by a midnight in between: make margin
// longer than the test takes from the call to its last read. The wait is
// logged.
func AwayFromMidnight(t testing.TB, q pg.Querier, margin time.Duration) {
	t.Helper()
	left := UntilMidnight(t, q)
	if left > margin {
		return
	}
	t.Logf("pgtest: the database's day ends in %s, within %s: waiting for midnight", left, margin)
	time.Sleep(left + time.Second)
}

// UntilMidnight is how long until the database's day ends: the sooner of
// its session time zone's midnight and UTC's.
func UntilMidnight(t testing.TB, q pg.Querier) time.Duration {
	t.Helper()
	left := Scalar[float64](t, q, `SELECT extract(epoch FROM least(
		date_trunc('day', now()) + interval '1 day' - now(),
		date_trunc('day', now() AT TIME ZONE 'UTC') + interval '1 day' - (now() AT TIME ZONE 'UTC')))`)
	return time.Duration(left * float64(time.Second))
}
