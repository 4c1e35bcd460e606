package pgtest

import (
	"context"
	"testing"
	"time"
	_ "time/tzdata" // the zones below, whatever the machine has

	"github.com/stretchr/testify/require"
)

// UntilMidnight is the time to the sooner of the session time zone's
// midnight and UTC's, east or west of UTC.
func TestUntilMidnight(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := NewPool(t)
	for _, zone := range []string{"UTC", "Pacific/Kiritimati", "America/Anchorage"} {
		tx, err := pool.Begin(ctx)
		require.NoError(t, err)
		_, err = tx.Exec(ctx, "SET LOCAL TimeZone = '"+zone+"'")
		require.NoError(t, err)
		now := Scalar[time.Time](t, tx, "SELECT now()") // the transaction's start, as UntilMidnight reads it
		loc, err := time.LoadLocation(zone)
		require.NoError(t, err)
		next := func(in *time.Location) time.Time {
			y, m, d := now.In(in).Date()
			return time.Date(y, m, d+1, 0, 0, 0, 0, in)
		}
		want := min(next(time.UTC).Sub(now), next(loc).Sub(now))
		require.InDelta(t, want.Seconds(), UntilMidnight(t, tx).Seconds(), 0.001, zone)
		require.NoError(t, tx.Rollback(ctx))
	}
}
