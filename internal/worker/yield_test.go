package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/inboxhq/inbox/internal/envelope"
	"github.com/inboxhq/inbox/internal/pgtest"
	"github.com/inboxhq/inbox/internal/testlog"
)

// feed processes perTick envelopes a tick for ticks ticks from t, ticking
// after each, and returns the time after.
func feed(y *Yield, t time.Time, perTick int64, ticks int) time.Time {
	for range ticks {
		y.processed.Add(perTick)
		t = t.Add(yieldTick)
		y.Tick(t)
	}
	return t
}

// The limit follows ingest's signals: each cuts it by 30 % (once per
// signalGap), the first from the rate processed lately, never below
// MinRate; without signals it rises slowly, never past 1.5 times the rate
// processed, and after releaseAfter the worker is unlimited.
func TestYieldCutsOnPressureAndLetsGo(t *testing.T) {
	t.Parallel()
	y := NewYield(100, 0, time.Minute)
	var set []float64
	y.Set = func(l float64) { set = append(set, l) }
	t0 := time.Unix(1000, 0)
	y.Tick(t0)
	now := feed(y, t0, 200, 50) // 2,000/s for 5 s
	require.Zero(t, y.Limit(), "no signal: not yielding")
	require.InDelta(t, 2000, y.rate, 20)

	y.Signal(now)
	require.InDelta(t, 1400, y.Limit(), 14, "the first signal: 30 % under the rate processed lately")
	y.pace(now, 1) // a batch held to the limit
	y.Signal(now.Add(signalGap / 2))
	require.InDelta(t, 1400, y.Limit(), 14, "another within signalGap cuts nothing more")
	now = now.Add(signalGap)
	y.Signal(now)
	require.InDelta(t, 980, y.Limit(), 10, "later ones cut the limit by 30 %")
	now = now.Add(signalGap)
	y.Signal(now)
	require.InDelta(t, 980, y.Limit(), 10, "no batch held to the limit since the last cut: no cut")
	for range 20 {
		now = now.Add(signalGap)
		y.pace(now, 1)
		y.Signal(now)
	}
	require.Equal(t, 100.0, y.Limit(), "never below MinRate")

	// Quiet for 1.5 s, processing at the limit: raised after quietAfter,
	// 1 % a tick, under 1.5 times what is processed.
	now = feed(y, now, 10, 15)
	// 15 ticks, the first two inside quietAfter: 13 raises of 1 %.
	require.InDelta(t, 100*math.Pow(1.01, 13), y.Limit(), 1)
	require.LessOrEqual(t, y.Limit(), 1.5*y.rate)
	// Quiet past releaseAfter: unlimited again.
	feed(y, now, 10, int(releaseAfter/yieldTick))
	require.Zero(t, y.Limit())
	require.Equal(t, 0.0, set[len(set)-1], "the gauge told")
	require.InDelta(t, 1400, set[0], 14, "the gauge told each change")
}

// Not yielding, a batch never waits. Yielding, batches are spaced by their
// size at the limit, the first after a lull at once; no wait passes
// maxYieldWait, and the debt past it is not carried: when the limit is
// lifted or raised, the next batch goes at once or at the new pace.
func TestYieldPacesBatchesWithoutCarryingDebt(t *testing.T) {
	t.Parallel()
	y := NewYield(1, 0, time.Minute)
	t0 := time.Unix(1000, 0)
	for range 10 {
		require.Zero(t, y.pace(t0, MaxBatchLimit), "not yielding")
	}

	y.mu.Lock()
	y.setLocked(120) // 60 envelopes take 500 ms
	y.mu.Unlock()
	require.Zero(t, y.pace(t0, 60), "the first goes at once")
	require.Equal(t, 500*time.Millisecond, y.pace(t0, 60))
	require.Equal(t, time.Second, y.pace(t0, 60), "booked behind the one before")
	for range 20 {
		require.Equal(t, maxYieldWait, y.pace(t0, 60), "never past maxYieldWait, however many wait at once")
	}
	// A second later the capped batches have all gone (at t0 + 1 s, each
	// booked 500 ms): the next waits for the last one's share, not behind
	// 10 s of debt.
	require.Equal(t, 500*time.Millisecond, y.pace(t0.Add(time.Second), 60))
	y.mu.Lock()
	y.setLocked(6000) // raised: 60 envelopes take 10 ms
	y.mu.Unlock()
	require.LessOrEqual(t, y.pace(t0.Add(3*time.Second), 60), 10*time.Millisecond, "the raised limit acts on the next batch")
	y.mu.Lock()
	y.setLocked(0)
	y.mu.Unlock()
	require.Zero(t, y.pace(t0.Add(3*time.Second), 60), "lifted: no wait")
}

// wait sleeps what pace books and counts every envelope; a batch whose
// context ends stops waiting.
func TestYieldWaitSleepsItsShare(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	y := NewYield(1, 0, time.Minute)
	y.mu.Lock()
	y.setLocked(200) // 60 envelopes take 300 ms
	y.mu.Unlock()
	start := time.Now()
	y.wait(ctx, 60, 0) // the first goes at once
	y.wait(ctx, 60, 0)
	require.GreaterOrEqual(t, time.Since(start), 300*time.Millisecond, "the second batch waited its share")
	require.EqualValues(t, 120, y.processed.Load(), "every envelope counted")

	cctx, cancel := context.WithCancel(ctx)
	cancel()
	start = time.Now()
	for range 5 {
		y.wait(cctx, 60, 0) // each booked up to a second ahead
	}
	require.Less(t, time.Since(start), 5*maxYieldWait/2, "cancelled batches do not wait")
}

// Yielding defers processing by at most MaxLag: a batch whose
// longest-waiting job waited longer does not wait for its share, books
// none of the limit (the next batch waits only its own share), and is
// counted as behind; one within MaxLag still waits.
func TestYieldDefersNoFurtherThanMaxLag(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	y := NewYield(1, 0, time.Minute)
	behind := 0
	y.Behind = func() { behind++ }
	y.wait(ctx, 60, 2*time.Minute)
	require.Zero(t, behind, "not yielding: nothing to count")
	y.mu.Lock()
	y.setLocked(120) // 60 envelopes take 500 ms
	y.mu.Unlock()
	y.wait(ctx, 60, 0) // the first goes at once, booking 500 ms
	start := time.Now()
	y.wait(ctx, 60, time.Minute+time.Second)
	require.Less(t, time.Since(start), 250*time.Millisecond, "past MaxLag: no wait")
	require.Equal(t, 1, behind)
	y.wait(ctx, 60, time.Minute-5*time.Second)
	waited := time.Since(start)
	require.GreaterOrEqual(t, waited, 250*time.Millisecond, "within MaxLag: it waits its share")
	require.Less(t, waited, 750*time.Millisecond, "behind the first batch's 500 ms only: the one past MaxLag booked none")
	require.Equal(t, 1, behind)
	require.EqualValues(t, 240, y.processed.Load(), "every envelope counted")
}

// A batch's lag is its longest wait between a job becoming available
// (scheduled) and being fetched (attempted); a job never fetched counts
// nothing.
func TestBatchLag(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(1000, 0)
	job := func(scheduled, fetchedAfter time.Duration) *river.Job[envelope.ProcessArgs] {
		at := t0.Add(scheduled + fetchedAfter)
		return &river.Job[envelope.ProcessArgs]{JobRow: &rivertype.JobRow{ScheduledAt: t0.Add(scheduled), AttemptedAt: &at}}
	}
	require.Equal(t, 40*time.Second, batchLag([]*river.Job[envelope.ProcessArgs]{
		job(0, time.Second), job(-time.Hour, 40*time.Second), job(time.Minute, 3*time.Second),
	}), "the longest wait, not the earliest schedule")
	require.Zero(t, batchLag([]*river.Job[envelope.ProcessArgs]{{JobRow: &rivertype.JobRow{ScheduledAt: t0}}}))
	require.Zero(t, batchLag(nil))
}

// Run listens on the channel with a connection of its own: a NOTIFY there
// (ingest's, here sent by hand) makes a busy worker yield; one saying
// ingest refuses deliveries makes batches that keep up yield too. While it
// yields it reads the arrivals, and says when that fails.
func TestYieldFollowsNotifications(t *testing.T) {
	t.Parallel()
	url := pgtest.NewURL(t)
	pool := pgtest.OpenPool(t, url)
	cfg, err := pgx.ParseConfig(url)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	y := NewYield(50, time.Second, time.Minute)
	var reads atomic.Int64
	y.Arrivals = func(context.Context) (int64, error) {
		reads.Add(1)
		return 0, errors.New("permission denied for sequence envelope_id_seq")
	}
	logs := &testlog.Buffer{}
	go y.Run(ctx, cfg, envelope.PressureChannel, slog.New(slog.NewTextHandler(logs, nil)))
	// A NOTIFY before the LISTEN is lost: send until one arrives. The
	// worker processes meanwhile (an idle one has nothing to yield).
	pgtest.Eventually(t, 10*time.Second, "the worker to yield on a notification", func() (bool, string) {
		y.processed.Add(1000)
		_, err := pool.Exec(ctx, "SELECT pg_notify($1, '')", envelope.PressureChannel)
		require.NoError(t, err)
		return y.Limit() > 0, fmt.Sprintf("limit %v", y.Limit())
	})
	require.False(t, y.refused(time.Now()), "plain pressure: batches that keep up do not yield")
	pgtest.Eventually(t, 10*time.Second, "the worker to hear that ingest refuses deliveries", func() (bool, string) {
		_, err := pool.Exec(ctx, "SELECT pg_notify($1, $2)", envelope.PressureChannel, envelope.PressureRefusing)
		require.NoError(t, err)
		return y.refused(time.Now()), ""
	})
	pgtest.Eventually(t, 10*time.Second, "the failed read of the arrivals to be logged", func() (bool, string) {
		return strings.Contains(logs.String(), "reading the envelopes stored so far failed"), logs.String()
	})
	failed := reads.Load()
	pgtest.Eventually(t, 10*time.Second, "two reads more", func() (bool, string) {
		_, err := pool.Exec(ctx, "SELECT pg_notify($1, '')", envelope.PressureChannel) // a limit in force: the reads go on
		require.NoError(t, err)
		return reads.Load() >= failed+2, ""
	})
	require.Equal(t, 1, strings.Count(logs.String(), "reading the envelopes stored so far failed"), "once a minute at most")
	require.Contains(t, logs.String(), "permission denied for sequence envelope_id_seq")
}

// Every batch goes through the yield before its transaction.
func TestBatchesGoThroughTheYield(t *testing.T) {
	t.Parallel()
	r := newBatchRig(t)
	r.w.Yield = NewYield(1, 0, time.Minute)
	ids := payments(t, r, 3, "yield")
	for _, ch := range r.batch(t, ids) {
		require.NoError(t, verdict(t, ch))
	}
	require.EqualValues(t, 4, r.w.Yield.processed.Load(), "the gate's batch and the batch of three")
	require.Equal(t, 3, pgtest.Count(t, r.pool, `SELECT count(*) FROM envelope WHERE id = ANY($1) AND status = 'done'`, ids))
}

// A worker's probe of its own listener (which every worker on the channel
// receives) is not a signal; ingest's notification is.
func TestYieldIgnoresProbes(t *testing.T) {
	t.Parallel()
	y := NewYield(50, 0, time.Minute)
	t0 := time.Unix(1000, 0)
	y.Tick(t0)
	now := feed(y, t0, 100, 20) // 1,000/s
	y.notified(probePayload, now)
	require.Zero(t, y.Limit(), "a probe: not yielding")
	require.False(t, y.refused(now))
	y.notified("", now)
	require.InDelta(t, 700, y.Limit(), 7, "ingest's notification: yielding")
	require.False(t, y.refused(now), "plain pressure")
	y.pace(now, 1)
	y.notified(envelope.PressureRefusing, now.Add(signalGap))
	require.InDelta(t, 490, y.Limit(), 5, "ingest refusing deliveries: a signal too")
	require.True(t, y.refused(now.Add(signalGap)))
}

// The first cut is from what the worker does: a worker processing under
// its floor has nothing to yield, and one that just became busy is cut
// from its last tick's rate, not from an average still weighed down by the
// idle time before (which would hold it at its floor while its backlog
// grows).
func TestYieldCutsFromWhatABusyWorkerDoes(t *testing.T) {
	t.Parallel()
	y := NewYield(100, 0, time.Minute)
	t0 := time.Unix(1000, 0)
	y.Tick(t0)
	now := feed(y, t0, 0, 20) // idle for 2 s
	y.Signal(now)
	require.Zero(t, y.Limit(), "idle: nothing to yield")
	now = feed(y, now, 8, 10) // 80/s, under the floor
	y.Signal(now)
	require.Zero(t, y.Limit(), "processing under the floor: nothing to yield")
	now = feed(y, now, 100, 1) // busy: 1,000/s in the last tick
	require.Less(t, y.rate, 500.0, "the average still remembers the idle time")
	y.Signal(now)
	require.InDelta(t, 700, y.Limit(), 7, "cut from the last tick's rate")
}

// A batch yields only when it is behind (its longest wait at least
// MinLag) or while ingest says it refuses deliveries (for refusingHold
// after the last time it said so); one that keeps up books none of the
// limit, so the next batch behind waits only its own share.
func TestYieldOnlyWhenBehindOrRefused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	y := NewYield(1, time.Second, time.Minute)
	y.mu.Lock()
	y.setLocked(240) // 60 envelopes take 250 ms
	y.mu.Unlock()
	start := time.Now()
	for range 4 {
		y.wait(ctx, 60, 500*time.Millisecond)
	}
	require.Less(t, time.Since(start), 200*time.Millisecond, "keeping up: no batch waits")
	start = time.Now()
	y.wait(ctx, 60, 2*time.Second) // behind: the first after a lull goes at once, booking 250 ms
	y.wait(ctx, 60, 2*time.Second)
	waited := time.Since(start)
	require.GreaterOrEqual(t, waited, 200*time.Millisecond, "behind: it waits its share")
	require.Less(t, waited, 450*time.Millisecond, "the batches that kept up booked none")

	now := time.Now()
	y.Refusing(now) // also a signal: the limit is cut to 168/s
	require.True(t, y.refused(now.Add(refusingHold-time.Millisecond)))
	require.False(t, y.refused(now.Add(refusingHold)), "held for refusingHold")
	start = time.Now()
	y.wait(ctx, 60, 0)
	require.GreaterOrEqual(t, time.Since(start), 100*time.Millisecond, "ingest refusing: a batch that keeps up yields too")
	require.EqualValues(t, 420, y.processed.Load(), "every envelope counted")
}

// A surge (envelope.PressureSurge) drops the limit to the floor at once,
// not by a cut, and for surgeHold a batch that keeps up yields too; a
// surge already at the floor changes nothing.
func TestYieldDropsToTheFloorOnASurge(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	y := NewYield(600, time.Second, time.Minute) // 60 envelopes take 100 ms
	var set []float64
	y.Set = func(l float64) { set = append(set, l) }
	t0 := time.Unix(1000, 0)
	y.Tick(t0)
	now := feed(y, t0, 200, 50) // 2,000/s for 5 s
	y.notified(envelope.PressureSurge, now)
	require.Equal(t, 600.0, y.Limit(), "at the floor at once, not 30 % under 2,000/s")
	require.True(t, y.refused(now.Add(surgeHold-time.Millisecond)))
	require.False(t, y.refused(now.Add(surgeHold)), "held for surgeHold")
	y.notified(envelope.PressureSurge, now.Add(yieldTick))
	require.Equal(t, []float64{600}, set, "already at the floor: nothing told again")

	y.Surge(time.Now())
	start := time.Now()
	y.wait(ctx, 60, 0) // keeping up, but the load surged: the first goes at once, booking 100 ms
	y.wait(ctx, 60, 0)
	require.GreaterOrEqual(t, time.Since(start), 80*time.Millisecond, "a batch that keeps up yields during a surge")
}

// yieldFeed drives a Yield tick by tick as Run does, on a clock of its
// own: each tick its worker processes some envelopes, its latest batch
// lags some time and envelopes arrive; while a limit is in force the
// arrivals are read every tick (pollArrivals reads them every
// arrivalEvery, also only while a limit is in force), not while the worker
// is unlimited, nor while reading fails.
type yieldFeed struct {
	y   *Yield
	now time.Time
	// step is the time between ticks: yieldTick, or more where a worker
	// starved of CPU misses ticks (a time.Ticker drops them).
	step    time.Duration
	stored  int64 // the envelopes stored so far, what Arrivals returns
	failing bool  // reading the arrivals fails: none read, though they arrive
}

// newYieldFeed returns a feed of y, ticked once at its start.
func newYieldFeed(y *Yield) *yieldFeed {
	f := &yieldFeed{y: y, now: time.Unix(1000, 0), step: yieldTick}
	y.Tick(f.now)
	return f
}

// run runs ticks ticks, in each of which the worker processes per
// envelopes, its latest batch lagging lag, and arrive envelopes arrive.
func (f *yieldFeed) run(per, arrive int64, ticks int, lag time.Duration) {
	for range ticks {
		f.y.lag.Store(int64(lag))
		f.y.processed.Add(per)
		f.now = f.now.Add(f.step)
		f.stored += arrive
		if !f.failing && f.y.Limit() > 0 {
			f.y.noteArrivals(f.stored, f.now)
		}
		f.y.Tick(f.now)
	}
}

// lifted brings the worker to a lift: processing 1,000/s, then held to a
// limit at 700/s with its batches 2 s behind while 2,000 envelopes/s
// arrive, lifted after releaseAfter (the arrival rate known then).
func (f *yieldFeed) lifted(t *testing.T) {
	t.Helper()
	f.run(100, 200, 20, 0)
	f.y.Signal(f.now)
	f.run(70, 200, 20, 2*time.Second)
	require.Zero(t, f.y.Limit(), "lifted after releaseAfter")
}

// futileLift brings the worker to the end of a futile lift: lifted, then
// unlimited for a second while its batches fell further behind (3 s). The
// next limit set judges it so.
func (f *yieldFeed) futileLift(t *testing.T) {
	t.Helper()
	f.lifted(t)
	f.run(100, 200, 10, 3*time.Second)
}

// The limit is not lifted when the last lift was futile (it lasted
// futileAfter and processing did not catch up at all meanwhile) and
// envelopes still arrive at more than eased times the rate they did at
// that lift: it goes on rising instead, and is lifted once the arrivals
// fall. A lift that caught up, one too short to judge, or arrivals not
// known, lift the limit as before. The arrivals are read only while a
// limit is in force, as the worker reads them.
func TestYieldHoldsItsLimitWhileArrivalsOutpaceIt(t *testing.T) {
	t.Parallel()
	y := NewYield(100, time.Second, time.Minute)
	withheld := 0.0
	y.Withheld = func(s float64) { withheld += s }
	f := newYieldFeed(y)
	f.run(100, 200, 20, 0)
	y.Signal(f.now)
	require.InDelta(t, 700, y.Limit(), 7)
	f.run(70, 200, 20, 2*time.Second)
	require.Zero(t, y.Limit(), "the first lift: nothing says it is futile")
	f.run(100, 200, 10, 3*time.Second) // unlimited for 1 s, the lag grew

	y.Signal(f.now) // that lift was futile, at 2,000/s
	require.NotZero(t, y.Limit())
	// 2,000/s still arriving, no signal for 3 s: not lifted, still rising.
	limit := y.Limit()
	f.run(70, 200, 20, 4*time.Second)
	require.Greater(t, y.Limit(), limit, "raised while quiet")
	limit = y.Limit()
	f.run(70, 200, 10, 4*time.Second)
	require.Greater(t, y.Limit(), limit, "and while withheld, past releaseAfter")
	require.InDelta(t, 1.1, withheld, 0.01, "the ticks from releaseAfter on are counted, in seconds")
	f.run(70, 170, 1, 4*time.Second) // 1,700/s: not eased enough
	require.NotZero(t, y.Limit())
	f.run(70, 150, 1, 4*time.Second) // 1,500/s: under eased x 2,000/s
	require.Zero(t, y.Limit(), "arrivals fallen: lifted")

	// This lift caught up some (the lag fell, still over MinLag), so the
	// next is not withheld, however fast envelopes arrive.
	f.run(100, 200, 10, 3*time.Second)
	y.Signal(f.now)
	require.NotZero(t, y.Limit())
	f.run(70, 200, 20, 2*time.Second)
	require.Zero(t, y.Limit(), "the last lift caught up: lifted after releaseAfter")

	// A lift cut short (under futileAfter) is not judged futile.
	f.run(100, 200, 2, 5*time.Second)
	y.Signal(f.now)
	f.run(70, 200, 20, 6*time.Second)
	require.Zero(t, y.Limit(), "a lift too short to judge: lifted")

	// Futile again, but the arrivals not read lately (Arrivals failing).
	f.run(100, 200, 10, 7*time.Second)
	y.Signal(f.now)
	f.failing = true
	f.run(70, 200, 20, 8*time.Second)
	f.failing = false
	require.Zero(t, y.Limit(), "no arrival rate known: lifted after releaseAfter")
	require.InDelta(t, 1.2, withheld, 0.01, "only the two ticks above withheld since")

	// Futile again, and then the load ends: lifted once quiet for
	// quietAfter, without waiting out releaseAfter.
	f.run(100, 200, 10, 9*time.Second)
	y.Signal(f.now) // futile, but no arrival rate known at its lift
	f.run(70, 200, 20, 9*time.Second)
	require.Zero(t, y.Limit(), "lifted after releaseAfter, at 2,000/s")
	f.run(100, 200, 10, 10*time.Second)
	y.Signal(f.now) // futile, at 2,000/s
	f.run(70, 200, 4, 10*time.Second)
	require.NotZero(t, y.Limit(), "still arriving as fast: held")
	f.run(70, 100, 4, 10*time.Second) // 1,000/s
	require.Zero(t, y.Limit(), "the arrivals fell: lifted within quietAfter of the last signal's silence")
	require.InDelta(t, 1.2, withheld, 0.01, "nothing withheld: releaseAfter never passed")

	// Futile, withheld at 2,000/s; then the worker catches up under its
	// limit (its batches under MinLag): the limit holds nothing back, and
	// it is lifted though the arrivals never fell.
	f.run(100, 200, 10, 11*time.Second)
	y.Signal(f.now)
	f.run(70, 200, 25, 12*time.Second)
	require.NotZero(t, y.Limit(), "withheld")
	f.run(100, 200, 1, 500*time.Millisecond)
	require.Zero(t, y.Limit(), "caught up under the limit: lifted")

	// A lift that held for a minute without pressure worked: judged when a
	// later episode sets a limit, it is not futile, however the lag then
	// compares with the lag at the lift.
	f.run(100, 200, 600, 12*time.Second)
	y.Signal(f.now)
	f.run(70, 200, 25, 13*time.Second)
	require.Zero(t, y.Limit(), "the last lift held for a minute: not futile, lifted after releaseAfter")

	// A lift after which the lag held where it was (13 s at the lift and
	// when the next limit is set) is not futile: only one the lag grew
	// through is.
	f.run(100, 200, 10, 13*time.Second)
	y.Signal(f.now)
	f.run(70, 200, 25, 14*time.Second)
	require.Zero(t, y.Limit(), "the lag held through the last lift: not futile, lifted after releaseAfter")
}

// inbox_worker_yield_withheld_seconds_total counts the time each withheld
// tick spans, not a tick's nominal 100 ms: a worker starved of CPU misses
// ticks (a time.Ticker drops them), and the counter still tells the
// seconds withheld.
func TestYieldCountsTheTimeWithheld(t *testing.T) {
	t.Parallel()
	y := NewYield(100, time.Second, time.Minute)
	withheld := 0.0
	y.Withheld = func(s float64) { withheld += s }
	f := newYieldFeed(y)
	f.futileLift(t)
	y.Signal(f.now)
	f.step = 250 * time.Millisecond
	f.run(175, 500, 12, 4*time.Second) // 700/s processed, 2,000/s arriving, for 3 s
	require.NotZero(t, y.Limit(), "withheld")
	require.InDelta(t, 1.25, withheld, 0.01, "five ticks from releaseAfter on, of 250 ms each")
}

// A lift is judged when a limit is set again, whatever sets it: a surge
// (envelope.PressureSurge) as well as a cut. After a futile lift the
// limit the surge set is withheld while envelopes arrive as fast.
func TestYieldJudgesTheLiftASurgeEnds(t *testing.T) {
	t.Parallel()
	y := NewYield(100, time.Second, time.Minute)
	f := newYieldFeed(y)
	f.futileLift(t)
	y.Surge(f.now)
	require.Equal(t, 100.0, y.Limit(), "at the floor")
	f.run(70, 200, 25, 4*time.Second)
	require.NotZero(t, y.Limit(), "the lift was futile and 2,000/s still arrive: withheld past releaseAfter")
}

// A lift is judged when a limit is set again, by the lag then: a signal
// that sets none (the worker processing under its floor, as through a
// stall) judges nothing. A worker that stalled early in its lift and then
// caught up did not lift in vain, and its next lift is not withheld.
func TestYieldJudgesALiftWhenALimitIsSet(t *testing.T) {
	t.Parallel()
	y := NewYield(100, time.Second, time.Minute)
	f := newYieldFeed(y)
	f.lifted(t)                      // the batches 2 s behind
	f.run(0, 200, 10, 3*time.Second) // stalled for 1 s: 3 s behind
	y.Signal(f.now)
	require.Zero(t, y.Limit(), "processing under its floor: no limit")
	f.run(150, 200, 10, 1500*time.Millisecond) // at 1,500/s it caught up some
	y.Signal(f.now)
	require.NotZero(t, y.Limit())
	f.run(105, 200, 25, 1500*time.Millisecond)
	require.Zero(t, y.Limit(), "the lift caught up by the time a limit was set: not futile, lifted after releaseAfter")
}

// The arrival rate is two close readings' difference over the time
// between them. A reading arrivalStale or more after the one before (the
// reads failing meanwhile, or none made while the worker was unlimited),
// or one lower than it (the sequence restarted), tells none, and the next
// is measured from it: neither a dip averaged over the gap nor a count
// that went back reads as the peak's end and lifts a withheld limit
// while envelopes arrive as fast as at the futile lift.
func TestYieldReadsTheArrivalRateFromCloseReadings(t *testing.T) {
	t.Parallel()
	y := NewYield(100, time.Second, time.Minute)
	f := newYieldFeed(y)
	f.futileLift(t)
	y.Signal(f.now)
	f.run(70, 200, 5, 4*time.Second) // read: 2,000/s, as at the lift

	// The reads fail for 2.9 s while the pressure goes on and the
	// arrivals dip to 1,000/s; then they are back at 2,000/s, and the
	// signals stop.
	f.failing = true
	for range 25 {
		f.run(70, 100, 1, 4*time.Second)
		y.Signal(f.now)
	}
	f.run(70, 200, 3, 4*time.Second)
	f.failing = false
	f.run(70, 200, 1, 4*time.Second) // quiet for 400 ms
	require.NotZero(t, y.Limit(), "the dip averaged over the gap is not the peak's end")
	f.run(70, 200, 20, 4*time.Second)
	require.NotZero(t, y.Limit(), "2,000/s read again: withheld past releaseAfter")

	f.stored = 0 // the sequence restarted
	f.run(70, 200, 1, 4*time.Second)
	require.NotZero(t, y.Limit(), "a count that went back is not the peak's end")
	// Past arrivalStale from the last rate read: only readings measured
	// from the one after the restart keep the rate fresh, and withheld.
	f.run(70, 200, 25, 4*time.Second)
	require.NotZero(t, y.Limit(), "2,000/s, measured from the reading after it: withheld")
}
