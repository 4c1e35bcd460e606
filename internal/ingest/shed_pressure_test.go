package ingest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The shedder refuses only past after; pressure needs the age above target
// at every look for a whole interval, and one look at or under target
// starts the count again.
func TestShedderPressureNeedsAStandingQueue(t *testing.T) {
	t.Parallel()
	s := &shedder{after: 250 * time.Millisecond, target: 25 * time.Millisecond, interval: 50 * time.Millisecond}
	t0 := time.Unix(1000, 0)
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }

	require.False(t, s.refuse(ms(100), t0), "above target, under after: not refused")
	require.False(t, s.pressure(ms(100), t0.Add(ms(30))), "above target for 30 ms: no pressure yet")
	require.True(t, s.pressure(ms(100), t0.Add(ms(50))), "above target for the interval: pressure")
	require.False(t, s.refuse(ms(10), t0.Add(ms(60))), "a delivery finds the age under target")
	require.False(t, s.pressure(ms(100), t0.Add(ms(70))), "which starts the count again")
	require.False(t, s.pressure(ms(100), t0.Add(ms(110))), "40 ms above: not yet")
	require.True(t, s.pressure(ms(100), t0.Add(ms(120))))
	require.False(t, s.pressure(ms(20), t0.Add(ms(130))), "the age itself under target: none")

	// With no delivery arriving, a held one alone can stand the queue: the
	// checks count from the first that sees it above target.
	require.False(t, s.pressure(ms(40), t0.Add(ms(200))))
	require.True(t, s.pressure(ms(90), t0.Add(ms(250))))

	require.True(t, s.refuse(ms(251), t0), "past after: refused")
	off := &shedder{after: -1, target: -1, interval: ms(50)}
	require.False(t, off.refuse(time.Hour, t0), "negative after: never refused")
	require.False(t, off.pressure(time.Hour, t0.Add(time.Hour)), "negative target: never pressure")
}
