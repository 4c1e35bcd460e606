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
	t0 := time.Unix(1000, 0)
	s := testShedder(t0, 250*time.Millisecond, 25*time.Millisecond, 50*time.Millisecond, 0)
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
	off := testShedder(t0, -1, -1, ms(50), 0)
	require.False(t, off.refuse(time.Hour, t0), "negative after: never refused")
	require.False(t, off.pressure(time.Hour, t0.Add(time.Hour)), "negative target: never pressure")
}

// Once a delivery was refused (the queue past after), ingest is over
// capacity: a delivery finding the age past overload is refused too, and
// each such refusal holds the shorter limit a second more; an age between
// the two is a blip otherwise, and passes. With overload off, after alone
// decides; with after off, nothing is refused.
func TestShedderHoldsTheShorterLimitOnceRefusing(t *testing.T) {
	t.Parallel()
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	t0 := time.Unix(1000, 0)
	at := func(n int) time.Time { return t0.Add(ms(n)) }
	s := testShedder(t0, ms(250), ms(35), ms(100), ms(70))

	require.Equal(t, ms(250), s.limit(t0))
	require.False(t, s.refuse(ms(200), t0), "a blip under after: passes")
	require.False(t, s.refuse(ms(250), at(1)), "at after: passes")
	require.True(t, s.refuse(ms(251), at(2)), "past after: refused")
	require.Equal(t, ms(70), s.limit(at(3)), "refusing: the shorter limit")
	require.False(t, s.refuse(ms(70), at(3)), "at overload: passes")
	require.True(t, s.refuse(ms(71), at(500)), "past overload within the hold: refused, and the hold starts again")
	require.True(t, s.refuse(ms(71), at(400)), "a refusal decided a moment earlier, on another goroutine")
	require.Equal(t, ms(70), s.limit(at(1450)), "it did not shorten the later hold")
	require.Equal(t, ms(70), s.limit(at(1499)), "a second after the last refusal, not the first")
	require.Equal(t, ms(250), s.limit(at(1500)), "a second with none refused: after again")
	require.False(t, s.refuse(ms(200), at(1500)))
	require.Equal(t, int64(3), s.refused.Load(), "every refusal counted (RunPressure tells the workers)")
	require.Equal(t, int64(1), s.holds.Load(), "one hold, renewed twice")
	require.True(t, s.refuse(ms(251), at(2000)))
	require.Equal(t, int64(2), s.holds.Load(), "a refusal after the hold ended begins another")

	off := testShedder(t0, ms(250), 0, 0, -1)
	require.True(t, off.refuse(ms(251), t0))
	require.False(t, off.refuse(ms(200), at(1)), "no overload limit: after alone")
	require.Equal(t, ms(250), off.limit(at(1)))

	never := testShedder(t0, -1, 0, 0, ms(70))
	require.False(t, never.refuse(time.Hour, t0), "no --shed-after: nothing refused for the queue")
}

// testShedder returns a shedder with these limits whose clock starts at t0
// (the tests' fake times are offsets from it).
func testShedder(t0 time.Time, after, target, interval, overload time.Duration) *shedder {
	s := newShedder(after, target, interval, overload, 0)
	s.epoch = t0
	return s
}

// The overload limit's default scales with the limits an operator raised
// for a slower store, and it is never longer than ShedAfter.
func TestShedAfterOverloadDefaults(t *testing.T) {
	t.Parallel()
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	for _, c := range []struct {
		in   Options
		want time.Duration
	}{
		{Options{}, DefaultShedAfterOverload},
		{Options{ShedAfter: time.Second}, ms(250)},
		{Options{PressureTarget: ms(100), ShedAfter: ms(500)}, ms(200)},
		{Options{ShedAfter: ms(50)}, ms(50)},
		{Options{ShedAfter: ms(100), ShedAfterOverload: ms(200)}, ms(100)},
		{Options{ShedAfterOverload: ms(40)}, ms(40)},
		{Options{ShedAfter: -1, ShedAfterOverload: ms(40)}, -1},
		{Options{ShedAfterOverload: -1}, -1},
	} {
		require.Equal(t, c.want, c.in.WithDefaults().ShedAfterOverload, "%+v", c.in)
	}
}

// surgeMeter: under pressure, a rate offered over ratio times the calm
// one (the average over checks without pressure) is a surge; the rate the
// store kept up with is not, however long the pressure; under pressure the
// calm rate follows five times slower, so a surge lasts a few seconds at
// most (less when a check finds no pressure or the rate offered falls
// back); a rate under surgeMinRate is never one (a trickle, or a blip
// after an idle spell); a ratio of 0 or less never finds one. A surge
// begins once, however many checks find it, unless a second of checks
// found none; the averages weigh a check by the time it spans, so checks
// a second apart (a NOTIFY that blocked) follow a load as fast as checks
// every 100 ms, and count a surge once too.
func TestSurgeMeterTellsAStepFromACalmLoad(t *testing.T) {
	t.Parallel()
	tick := 100 * time.Millisecond
	f := newFeeder(t, 1.5, tick)
	m, lookEvery := f.m, f.checks
	look := func(perSecond int64, pressure bool, n int) int { return lookEvery(tick, perSecond, pressure, n) }
	require.Zero(t, look(1000, false, 50), "no pressure: never a surge")
	require.InDelta(t, 1000, m.calm, 10, "the calm rate")
	require.Zero(t, look(1000, true, 30), "pressure at the calm rate (a checkpoint, a blip): no surge")
	require.InDelta(t, 1000, m.calm, 10, "pressure at the calm rate leaves it")
	require.Zero(t, look(1400, true, 10), "under 1.5 times the calm rate: no surge")
	require.Zero(t, look(1000, true, 30))
	require.Zero(t, look(3000, true, 1), "one check into a step to 3x: 1,400/s over the window")
	require.Equal(t, 25, look(3000, true, 25), "the next (1,800/s over the window) and every one for a few seconds: a surge")
	require.Equal(t, 1, f.begun, "begun once")
	require.Equal(t, 0, look(3000, false, 1), "one check without pressure")
	require.Equal(t, 1, look(3000, true, 1), "inside the surge")
	require.Equal(t, 1, f.begun, "still the same surge")
	require.Less(t, look(3000, true, 30), 15, "the calm rate follows under pressure: the surge ends though the pressure stands")
	require.Zero(t, look(3000, true, 20), "pressure at a rate that stood for seconds: no surge")
	require.Zero(t, look(3000, false, 40), "no pressure at the new rate: it is the calm one")
	require.InDelta(t, 3000, m.calm, 100)
	require.Zero(t, look(3000, true, 10), "pressure at the new calm rate: no surge")

	require.Zero(t, look(0, false, 100), "idle: the calm rate decays")
	require.Less(t, m.calm, 1.0)
	require.Zero(t, look(60, true, 20), "a trickle under pressure, far over the calm rate but under surgeMinRate: no surge")
	require.Zero(t, look(0, false, 100))
	require.Equal(t, 15, look(1000, true, 15), "a step from idle to a real load: a surge from the first check")
	require.Equal(t, 2, f.begun, "a second surge, after seconds without one")

	// Checks a second apart, each NOTIFY having blocked: the calm rate
	// follows a load in about as many seconds as with checks every 100 ms,
	// and a surge found at every check is f.begun once.
	require.Zero(t, lookEvery(time.Second, 1000, false, 5), "no pressure")
	require.InDelta(t, 1000, m.calm, 15, "five seconds at a one-second time constant (weighed per check, it would be about 560)")
	require.Zero(t, lookEvery(time.Second, 1000, false, 5))
	before := f.begun
	require.Equal(t, 2, lookEvery(1100*time.Millisecond, 2000, true, 2), "a step to 2x, slow checks: a surge at each (the last check's rate, not five checks'), for its first 2 s")
	require.Equal(t, before+1, f.begun, "begun once, though the checks are more than a second apart")
	require.Zero(t, lookEvery(1100*time.Millisecond, 0, true, 1), "a second with no arrivals: no surge")

	// A surge begins again after a second of checks that found none, not
	// before.
	require.Zero(t, lookEvery(tick, 1000, false, 100), "calm again at 1,000/s")
	before = f.begun
	require.Positive(t, look(3000, true, 5))
	require.Zero(t, look(1000, false, 8), "0.8 s without a surge")
	require.Positive(t, look(6000, true, 3))
	require.Equal(t, before+1, f.begun, "under a second apart: one surge")
	require.Zero(t, look(1000, false, 12), "1.2 s without a surge")
	require.Positive(t, look(9000, true, 3))
	require.Equal(t, before+2, f.begun, "over a second apart: two")

	f.m = newSurgeMeter(-1, tick, f.count, f.now)
	m = f.m
	require.Zero(t, look(1000, false, 10), "learning the calm rate")
	require.True(t, m.known)
	require.Zero(t, look(10000, true, 10), "ratio -1: never")
}

// A new meter knows no calm rate: under a load from its first check
// (a rolling restart, a replica added), pressure or not, it finds no surge
// and takes the first window wholly under that load as its calm rate; a
// load that starts a moment after it does the same; one idle for
// surgeLearn takes its calm rate to be 0, and a load then is a surge.
func TestSurgeMeterLearnsItsCalmRate(t *testing.T) {
	t.Parallel()
	tick := 100 * time.Millisecond
	for _, c := range []struct {
		name       string
		idleChecks int   // before the load; -1: a load of 300 ms, then 200 ms idle
		load       int64 // then 20 checks at this rate under pressure
		wantCalm   float64
		surges     int // of those 20
	}{
		{"under a load from the start", 0, 2000, 2000, 0},
		{"a load a second after the start", 10, 2000, 2000, 0},
		{"a load after an idle spell as long as surgeLearn", int(surgeLearn / tick), 2000, 0, 20},
		{"a load that starts, pauses and starts again", -1, 1000, 1000, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := newFeeder(t, 1.5, tick)
			m, look := f.m, f.look
			if c.idleChecks < 0 {
				// 300 ms at 4,000/s (not a window), then 200 ms idle: the
				// window still holds that load when the next one starts.
				require.Zero(t, look(4000, 3))
				require.Zero(t, look(0, 2))
				require.False(t, m.known)
			} else {
				require.Zero(t, look(0, c.idleChecks))
			}
			surges := look(c.load, 20)
			if c.surges > 0 {
				require.Equal(t, c.surges, surges, "idle: the calm rate is 0")
				return
			}
			require.Zero(t, surges, "no calm rate known: no surge")
			require.True(t, m.known)
			require.InDelta(t, c.wantCalm, m.calm, 100, "the first window wholly under the load")
			require.Positive(t, look(2*c.load, 10), "known: a step to twice it is a surge")
		})
	}
}

// A new meter under a trickle (under surgeMinRate) for surgeLearn takes
// that trickle as its calm rate, not 0: a load a little over it then is
// no surge.
func TestSurgeMeterLearnsATrickle(t *testing.T) {
	t.Parallel()
	f := newFeeder(t, 1.5, 100*time.Millisecond)
	m, look := f.m, f.look
	require.Zero(t, look(80, int(surgeLearn/f.tick)+1))
	require.True(t, m.known)
	require.InDelta(t, 80, m.calm, 1)
	require.Zero(t, look(110, 20), "110/s after 80/s: under 1.5 times the calm rate")
}

// feeder feeds a surge meter checks at a steady rate, counting the surges
// begun (each only at a check that finds one).
type feeder struct {
	t     *testing.T
	m     *surgeMeter
	tick  time.Duration
	count int64
	now   time.Time
	begun int
}

// newFeeder returns a feeder of a new meter with this ratio, checked every
// tick.
func newFeeder(t *testing.T, ratio float64, tick time.Duration) *feeder {
	now := time.Unix(1000, 0)
	return &feeder{t: t, m: newSurgeMeter(ratio, tick, 0, now), tick: tick, now: now}
}

// checks runs n checks every step at perSecond offered, pressure on or
// not, and returns how many found a surge.
func (f *feeder) checks(step time.Duration, perSecond int64, pressure bool, n int) (surges int) {
	for range n {
		f.count += perSecond * int64(step) / int64(time.Second)
		f.now = f.now.Add(step)
		surge, begun := f.m.look(f.count, pressure, f.now)
		if surge {
			surges++
		}
		if begun {
			require.True(f.t, surge, "only a check that finds a surge begins one")
			f.begun++
		}
	}
	return surges
}

// look runs n checks every tick at perSecond offered, all under pressure,
// and returns how many found a surge.
func (f *feeder) look(perSecond int64, n int) int { return f.checks(f.tick, perSecond, true, n) }
