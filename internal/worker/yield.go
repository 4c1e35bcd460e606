package worker

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inboxhq/inbox/internal/envelope"
)

// Yield slows this worker's processing while ingest says its store queue
// stands above its pressure target (a NOTIFY on envelope.PressureChannel,
// ingest's --pressure-target). The two share the database, and on one
// machine the CPU too; a webhook not acknowledged in time is retried by
// its provider (and a provider whose deliveries keep failing disables the
// endpoint), while one acknowledged can be processed a little later. So
// under overload intake keeps its latency, the backlog grows, and it
// drains at the worker's full rate once the pressure ends.
//
// The limit is an envelope rate, adjusted as TCP adjusts its window: each
// signal cuts it by 30 % (at most once per signalGap, and only when a batch
// was held to it since the last cut), the first from the rate processed
// lately (a surge drops it to MinRate at once); each tick with no signal
// for quietAfter raises it by 1 %, never past 1.5 times the rate
// processed lately; after releaseAfter without a signal the worker is
// unlimited again, unless the last lift was futile and envelopes arrive
// as fast as then (outpacedLocked): the limit then goes on rising, and is
// lifted when they slow. It never goes below MinRate, so processing goes on
// however long the pressure lasts. A batch waits for its envelopes' share
// of the limit before its transaction (at most maxYieldWait), holding its
// jobs.
//
// Yielding defers processing, so it happens only while the worker is
// already behind, the load surges or ingest is refusing deliveries, and
// only so far: a batch yields when its longest-waiting job waited between MinLag and
// MaxLag from becoming available to being fetched, or, under MinLag, when
// ingest said within the last refusingHold that it refuses deliveries
// (envelope.PressureRefusing), or within surgeHold that the load surged
// (envelope.PressureSurge). A worker within MinLag keeps up with what
// ingest accepts (the sustained rate is the one it keeps up with); near
// the machine's capacity ingest's store queue passes its target now and
// then whatever the worker does (its latency there comes from sharing the
// CPU at all), and yielding to each blip would only make the worker fall
// behind a load it sustains. A refused delivery is another matter: its
// provider must resend it, and a batch processed a little later costs
// nothing of the kind. Past MaxLag, without the bound, the backlog would
// grow for as long as the load lasts.
type Yield struct {
	// MinRate is the floor, in envelopes a second.
	MinRate float64
	// MinLag is how far behind a batch must be to yield: one whose
	// longest-waiting job waited less than this to be fetched (batchLag)
	// runs without yielding (0: every batch within MaxLag yields).
	MinLag time.Duration
	// MaxLag bounds the deferral: a batch whose longest-waiting job
	// waited longer than this to be fetched runs without yielding (so 0
	// never yields).
	MaxLag time.Duration
	// Set, when not nil, is told the limit whenever it changes (0: not
	// yielding): the inbox_worker_yield_limit gauge.
	Set func(limit float64)
	// Behind, when not nil, is called for each batch that did not yield
	// because of MaxLag: the inbox_worker_yield_behind_total counter.
	Behind func()
	// Arrivals, when not nil, returns how many envelopes have been stored
	// so far, a count that only grows (envelope.StoredSoFar): read
	// every arrivalEvery while yielding, it tells the rate work arrives at
	// (see Tick). Nil: the limit is lifted after releaseAfter regardless.
	Arrivals func(ctx context.Context) (int64, error)
	// Withheld, when not nil, is told the time of each tick (in seconds)
	// whose release of the limit was withheld (outpacedLocked): the
	// inbox_worker_yield_withheld_seconds_total counter.
	Withheld func(seconds float64)

	processed atomic.Int64
	// lag is the latest batch's lag (batchLag), in nanoseconds.
	lag atomic.Int64

	mu         sync.Mutex
	limit      float64   // 0: not yielding
	next       time.Time // when the next batch's share of the limit begins (pace)
	lastSignal time.Time
	lastCut    time.Time
	refusing   time.Time // the last notification that ingest refuses deliveries
	surged     time.Time // the last notification of a surge (envelope.PressureSurge)
	// paced: a batch was held to the limit (pace) since the last cut.
	// Only then does a signal cut further: a limit no batch is held to
	// (every batch keeping up, under MinLag) relieves nothing, and cutting
	// it on would leave a worker that falls behind at its floor at once.
	paced     bool
	rate      float64 // envelopes/s processed lately (EWMA over ticks)
	last      float64 // envelopes/s processed in the last tick
	lastCount int64
	lastTick  time.Time
	// released: the limit was lifted (after releaseAfter) at releasedAt
	// and none has been set since; releasedLag, the latest batch's lag
	// then; releasedArrival, the arrival rate then (0: not known).
	// futile: when a limit was next set, that lift had lasted at least
	// futileAfter (and at most futileWithin) and processing had not caught
	// up at all (the lag longer
	// than at the lift, and at least MinLag). Both are consulted only
	// while a limit is in force, so releasedArrival is then the judged
	// lift's.
	released, futile bool
	releasedAt       time.Time
	releasedLag      time.Duration
	releasedArrival  float64
	// arrival is the rate envelopes were stored at over the last
	// arrivalEvery, as of arrivalAt (zero: not known); arrived, arrivedAt
	// the count Arrivals last returned and when.
	arrival              float64
	arrivalAt, arrivedAt time.Time
	arrived              int64
}

// DefaultYieldMinRate is the default floor of Yield (--yield-min-rate),
// in envelopes a second: processing never stops, and the floor is a
// tenth of what one worker processes on two cores, so yielding can still
// give ingest most of the database.
const DefaultYieldMinRate = 200

// DefaultYieldMinLag is the default of Yield.MinLag (--yield-min-lag): a
// worker whose batches waited under a second is keeping up (a received ->
// done p99 within a second is what the sustained rate is measured by), and
// it does not yield.
const DefaultYieldMinLag = time.Second

// DefaultYieldMaxLag is the default of Yield.MaxLag (--yield-max-lag): a
// minute late is nothing to a payment, and it is far under the
// InboxBacklogOld alert (10 minutes); a peak shorter than about this is
// absorbed whole.
const DefaultYieldMaxLag = time.Minute

const (
	yieldTick    = 100 * time.Millisecond
	signalGap    = 200 * time.Millisecond
	quietAfter   = 300 * time.Millisecond
	releaseAfter = 2 * time.Second
	// refusingHold is how long after ingest last said it refuses
	// deliveries a batch under MinLag still yields (it says so at every
	// pressure check, 100 ms by default, while it does).
	refusingHold = time.Second
	// maxYieldWait bounds one batch's wait for its envelopes' share of the
	// limit: past it the batch runs anyway (a job must never time out
	// waiting to yield).
	maxYieldWait = time.Second
	// surgeHold is how long after a notification of a surge a batch
	// under MinLag still yields (ingest says so at every check, 100 ms by
	// default, while the surge lasts).
	surgeHold = 300 * time.Millisecond
	// arrivalEvery is how often Arrivals is read while yielding; an
	// arrival rate older than arrivalStale is not used.
	arrivalEvery = 500 * time.Millisecond
	arrivalStale = 2 * time.Second
	// futileAfter is how long a lift must have lasted to be judged
	// futile: over a shorter one the lag moves by no more than the gap
	// between batches.
	futileAfter = 500 * time.Millisecond
	// futileWithin: a lift is judged only when the next limit comes
	// within this of it. One that held longer let the worker run at its
	// full rate without pressure, or the worker ran under its floor
	// meanwhile (a stall, when signals set no limit): either way it is not
	// judged futile, whatever the lag is when a later episode (another
	// peak, a checkpoint) sets a limit again.
	futileWithin = 5 * time.Second
	// eased: a release is withheld only while envelopes arrive at more
	// than this share of the rate at the futile lift; under it the load
	// has eased (a peak's end), and the next lift is judged afresh.
	eased = 0.8
	// probePayload marks the notification a listener sends itself to
	// check that notifications reach it (ingest never sends it); probeWait
	// is how long it waits for it.
	probePayload = "probe"
	probeWait    = 5 * time.Second
)

// NewYield returns a Yield with floor minRate envelopes/s that yields
// only batches between minLag and maxLag behind, not yielding.
func NewYield(minRate float64, minLag, maxLag time.Duration) *Yield {
	return &Yield{MinRate: max(minRate, 1), MinLag: minLag, MaxLag: maxLag}
}

// Limit returns the current limit in envelopes/s, 0 when not yielding.
func (y *Yield) Limit() float64 {
	y.mu.Lock()
	defer y.mu.Unlock()
	return y.limit
}

// Signal records a pressure notification received at now.
func (y *Yield) Signal(now time.Time) {
	y.mu.Lock()
	defer y.mu.Unlock()
	y.lastSignal = now
	if now.Sub(y.lastCut) < signalGap {
		return
	}
	from := y.limit
	switch {
	case from == 0:
		// The first cut is from the rate processed lately: the average,
		// or the last tick's when higher (a worker that was idle and is
		// now busy has an average far under what it does: cut from that,
		// it would be held at the floor while the backlog grows). A worker
		// processing under the floor has nothing to yield: no limit, and
		// the next signal cuts from what it does then.
		from = max(y.rate, y.last)
		if from < y.MinRate {
			return
		}
		// A limit is set again: the lift before it is judged now, by the
		// lag now (a signal that sets none judges nothing).
		y.judgeLiftLocked(now)
	case !y.paced:
		return // no batch held to the limit since the last cut
	}
	y.lastCut, y.paced = now, false
	y.setLocked(max(y.MinRate, from*0.7))
}

// Refusing records a notification, received at now, that ingest refuses
// deliveries: a signal, and batches under MinLag yield for refusingHold.
func (y *Yield) Refusing(now time.Time) {
	y.mu.Lock()
	y.refusing = now
	y.mu.Unlock()
	y.Signal(now)
}

// Surge records a notification, received at now, that ingest is offered
// far more than it was while calm (envelope.PressureSurge): the limit
// drops to the floor at once, not by a cut, and batches under MinLag
// yield for surgeHold. In a step's first second the worker, still
// keeping up, would otherwise run at its full rate on the CPU and
// database ingest needs most then.
func (y *Yield) Surge(now time.Time) {
	y.mu.Lock()
	defer y.mu.Unlock()
	y.surged, y.lastSignal = now, now
	if y.limit == 0 {
		y.judgeLiftLocked(now)
	}
	if y.limit != y.MinRate {
		y.lastCut, y.paced = now, false
		y.setLocked(y.MinRate)
	}
}

// refused reports whether ingest said it refuses deliveries within
// refusingHold before now, or that it sees a surge within surgeHold.
func (y *Yield) refused(now time.Time) bool {
	y.mu.Lock()
	defer y.mu.Unlock()
	return (!y.refusing.IsZero() && now.Sub(y.refusing) < refusingHold) ||
		(!y.surged.IsZero() && now.Sub(y.surged) < surgeHold)
}

// Tick updates the rate processed lately and raises (or lifts) the limit
// when no signal has come for a while; called every yieldTick.
func (y *Yield) Tick(now time.Time) {
	y.mu.Lock()
	defer y.mu.Unlock()
	n := y.processed.Load()
	var dt float64 // seconds since the last tick (0: the first)
	if !y.lastTick.IsZero() {
		if dt = now.Sub(y.lastTick).Seconds(); dt > 0 {
			r := float64(n-y.lastCount) / dt
			y.rate = 0.7*y.rate + 0.3*r
			y.last = r
		}
	}
	y.lastCount, y.lastTick = n, now
	if y.limit == 0 {
		return
	}
	quiet := now.Sub(y.lastSignal)
	switch {
	case quiet >= quietAfter && y.easedLocked(now):
		// After a futile lift the arrivals tell the peak's end: the
		// backlog drains from now, not two quiet seconds on.
		y.liftLocked(now)
	case quiet >= releaseAfter && !y.outpacedLocked(now):
		y.liftLocked(now)
	case quiet >= releaseAfter && y.Withheld != nil:
		y.Withheld(max(dt, 0))
		fallthrough
	case quiet >= quietAfter:
		// Raised slowly, and never far past what is processed: a limit
		// the worker does not reach would hold nothing back at the next
		// signal's cut.
		y.setLocked(max(y.MinRate, min(y.limit*1.01, 1.5*y.rate)))
	}
}

// outpacedLocked reports whether lifting the limit now would be futile:
// the last lift was (it lasted at least futileAfter and processing did
// not catch up at all meanwhile, judgeLiftLocked), and envelopes still
// arrive at more than eased times the rate they did then. Lifting it
// would only run the worker at its full rate into a backlog that grows
// anyway, taking the machine from intake until the next signal cuts it
// again (at twice the sustained rate each lift was a second or two of
// refusals and slow answers). The limit goes on rising while no signal
// comes (held instead, it left a worker whose lift a checkpoint made look
// futile near capacity behind for as long as the load lasted), and is
// lifted once the arrivals fall (the peak's end: then after
// quietAfter, not releaseAfter, easedLocked), when
// they are not known (Arrivals unset or failing), or once the latest batch
// is under MinLag (the worker caught up: the limit holds nothing back). A worker that catches
// up when unlimited, as it does at a rate it sustains, is never
// withheld: the evidence is its own last lift's, read in the lag of the
// queue all workers share, so a fleet's workers judge the fleet.
func (y *Yield) outpacedLocked(now time.Time) bool {
	if time.Duration(y.lag.Load()) < y.MinLag {
		// The latest batch kept up: the limit holds nothing back, and
		// withholding its release would only keep a worker that caught up
		// under a limit for as long as the load lasts.
		return false
	}
	fallen, known := y.sinceFutileLiftLocked(now)
	return known && !fallen
}

// easedLocked reports whether, after a futile lift, envelopes now arrive
// at eased times its rate or less: the load has fallen (a peak's end).
func (y *Yield) easedLocked(now time.Time) bool {
	fallen, _ := y.sinceFutileLiftLocked(now)
	return fallen
}

// sinceFutileLiftLocked reports whether the last lift was futile with its
// arrival rate and the current one both known (known), and if so whether
// envelopes now arrive at eased times that rate or less (fallen).
func (y *Yield) sinceFutileLiftLocked(now time.Time) (fallen, known bool) {
	known = y.futile && y.releasedArrival > 0 && y.arrivalFreshLocked(now)
	return known && y.arrival <= eased*y.releasedArrival, known
}

// liftLocked lifts the limit at now, noting what the lift is judged by.
func (y *Yield) liftLocked(now time.Time) {
	y.setLocked(0)
	y.released, y.releasedAt, y.releasedLag = true, now, time.Duration(y.lag.Load())
	y.releasedArrival = 0
	if y.arrivalFreshLocked(now) {
		y.releasedArrival = y.arrival
	}
}

// judgeLiftLocked judges the last lift, if any, as a limit is set again
// at now (futile).
func (y *Yield) judgeLiftLocked(now time.Time) {
	if !y.released {
		return
	}
	lag := time.Duration(y.lag.Load())
	y.released = false
	held := now.Sub(y.releasedAt)
	y.futile = held >= futileAfter && held <= futileWithin && lag >= y.MinLag && lag > y.releasedLag
}

// arrivalFreshLocked reports whether the arrival rate was read within
// arrivalStale of now.
func (y *Yield) arrivalFreshLocked(now time.Time) bool {
	return !y.arrivalAt.IsZero() && now.Sub(y.arrivalAt) < arrivalStale
}

// noteArrivals records that Arrivals returned n at now. The rate is
// measured from the reading before, only when that came under
// arrivalStale before and n is not below it: a reading after a gap (reads
// failed, or none while unlimited) would average the gap in, and a count
// that went back (the sequence restarted) says nothing of a rate; either
// becomes the base of the next.
func (y *Yield) noteArrivals(n int64, now time.Time) {
	y.mu.Lock()
	defer y.mu.Unlock()
	if !y.arrivedAt.IsZero() && n >= y.arrived {
		if dt := now.Sub(y.arrivedAt).Seconds(); dt > 0 && dt < arrivalStale.Seconds() {
			y.arrival, y.arrivalAt = float64(n-y.arrived)/dt, now
		}
	}
	y.arrived, y.arrivedAt = n, now
}

func (y *Yield) setLocked(limit float64) {
	y.limit = limit
	if y.Set != nil {
		y.Set(limit)
	}
}

// wait holds a batch of n envelopes, whose longest-waiting job waited lag
// to be fetched, for its share of the limit (at most maxYieldWait, or
// until ctx ends), unless lag is under MinLag or past MaxLag; it counts
// them as processed. A batch that does not yield books none of the limit.
func (y *Yield) wait(ctx context.Context, n int, lag time.Duration) {
	if y == nil {
		return
	}
	y.processed.Add(int64(n))
	y.lag.Store(int64(lag))
	now := time.Now()
	if lag > y.MaxLag {
		if y.Behind != nil && y.Limit() > 0 {
			y.Behind()
		}
		return
	}
	if lag < y.MinLag && !y.refused(now) {
		return
	}
	d := y.pace(now, n)
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// pace books n envelopes at the limit and returns how long their batch
// waits, as of now. Batches are spaced n/limit apart; the first after a
// lull goes at once. A wait is never over maxYieldWait, and
// the debt past it is forgotten: however many batches wait at once, none
// is booked behind time it did not wait, so a higher limit (or its
// lifting) acts on the next batch.
func (y *Yield) pace(now time.Time, n int) time.Duration {
	y.mu.Lock()
	defer y.mu.Unlock()
	if y.limit == 0 {
		y.next = time.Time{}
		return 0
	}
	y.paced = true
	per := func(k int) time.Duration { return time.Duration(float64(k) / y.limit * float64(time.Second)) }
	if y.next.Before(now) {
		y.next = now // after a lull the batch goes at once; nothing is saved up
	}
	d := y.next.Sub(now)
	if d > maxYieldWait {
		d = maxYieldWait
		y.next = now.Add(d)
	}
	y.next = y.next.Add(per(n))
	return max(d, 0)
}

// Run listens for pressure on channel with a connection of its own (made
// from cfg, and made again after a failure) and ticks, until ctx ends;
// then the worker no longer yields (a shutdown drains at full rate).
func (y *Yield) Run(ctx context.Context, cfg *pgx.ConnConfig, channel string, logger *slog.Logger) {
	defer func() {
		y.mu.Lock()
		y.setLocked(0)
		y.released, y.futile = false, false // no episode carries into a later Run
		y.mu.Unlock()
	}()
	if y.Arrivals != nil {
		go y.pollArrivals(ctx, logger)
	}
	go func() {
		t := time.NewTicker(yieldTick)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case now := <-t.C:
				y.Tick(now)
			}
		}
	}()
	var warnedAt time.Time
	for ctx.Err() == nil {
		err := y.listen(ctx, cfg, channel)
		if ctx.Err() != nil {
			return
		}
		if time.Since(warnedAt) > time.Minute {
			warnedAt = time.Now()
			logger.Warn("listening for ingest's store pressure failed: processing does not yield until it works again", "error", err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

// pollArrivals reads Arrivals every arrivalEvery while a limit is in
// force, until ctx ends. A failed read leaves the rate unknown (it goes
// stale), and the limit is lifted as without Arrivals; the failure is
// logged, once a minute at most.
func (y *Yield) pollArrivals(ctx context.Context, logger *slog.Logger) {
	t := time.NewTicker(arrivalEvery)
	defer t.Stop()
	var warnedAt time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if y.Limit() == 0 {
			continue // a reading after a longer gap starts afresh (noteArrivals)
		}
		qctx, cancel := context.WithTimeout(ctx, arrivalEvery)
		n, err := y.Arrivals(qctx)
		cancel()
		switch {
		case err == nil:
			y.noteArrivals(n, time.Now())
		case ctx.Err() == nil && time.Since(warnedAt) > time.Minute:
			warnedAt = time.Now()
			logger.Warn("reading the envelopes stored so far failed: a lift of the yield limit is not withheld while it fails", "error", err)
		}
	}
}

func (y *Yield) listen(ctx context.Context, cfg *pgx.ConnConfig, channel string) error {
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{channel}.Sanitize()); err != nil {
		return err
	}
	// A notification of its own must come back: through a pooler in
	// transaction mode LISTEN succeeds but nothing ever arrives, and the
	// worker would silently never yield.
	if _, err := conn.Exec(ctx, "SELECT pg_notify($1, $2)", channel, probePayload); err != nil {
		return err
	}
	pctx, cancel := context.WithTimeout(ctx, probeWait)
	n, err := conn.WaitForNotification(pctx)
	cancel()
	if err != nil {
		return fmt.Errorf("no notification came back on %s within %s (is a pooler in transaction mode between the worker and PostgreSQL?): %w", channel, probeWait, err)
	}
	y.notified(n.Payload, time.Now())
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		y.notified(n.Payload, time.Now())
	}
}

// notified takes a notification on the channel: ingest's is a signal (one
// saying it refuses deliveries, more), a listener's probe of itself (any
// worker's) is not.
func (y *Yield) notified(payload string, now time.Time) {
	switch payload {
	case probePayload:
	case envelope.PressureRefusing:
		y.Refusing(now)
	case envelope.PressureSurge:
		y.Surge(now)
	default:
		y.Signal(now)
	}
}
