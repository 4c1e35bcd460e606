package ingest

import (
	"context"
	"math"
	"sync/atomic"
	"time"

	"github.com/inboxhq/inbox/internal/envelope"
)

// Pressure defaults (Options.PressureTarget, PressureInterval,
// PressureSurge).
const (
	DefaultPressureTarget   = 35 * time.Millisecond
	DefaultPressureInterval = 100 * time.Millisecond
	DefaultPressureSurge    = 1.5
)

// overloadHold is how long ingest counts itself over capacity after the
// last delivery refused for the store queue's age (Options.ShedAfterOverload).
const overloadHold = time.Second

// shedder reads the store queue age (how long the oldest delivery being
// stored has waited) as each delivery arrives, for these decisions:
//
//   - refuse: past after (--shed-after; overload while refusing, below)
//     the store is stalled or far behind, and a new delivery would only
//     wait behind it for its deadline: it is refused at once;
//   - pressure: the age stood above target (--pressure-target) for a
//     whole interval, no delivery in between finding it at or under
//     target: more is asked of the database than it does at that latency,
//     not a blip that clears by itself. Ingest then notifies
//     envelope.PressureChannel (RunPressure) and workers yield the
//     database to it. Nothing is refused for pressure alone;
//   - overload: once a delivery was refused, the queue having reached
//     after, more is offered than the database commits (or it is stalled),
//     and the queue would sit at after, every accepted delivery waiting that
//     long. Deliveries are then refused past the shorter overload
//     (--shed-after-overload) instead, until none has been for
//     overloadHold: the queue, and each accepted delivery's wait, stays
//     near it. (Ending it instead at the first look that finds the queue
//     at or under target doubled the accepted p99 where it acts: under
//     overload the queue dips that low between batches. docs/benchmarks.md)
type shedder struct {
	after, target, interval, overload time.Duration
	// surge is Options.PressureSurge (surgeMeter; <= 0: never).
	surge float64
	// calmKnown: the surge meter has learned its calm rate (surgeMeter;
	// RunPressure sets it).
	calmKnown atomic.Bool

	// epoch is the origin of the times kept below, as offsets from it (see
	// at): time.Now's monotonic reading, so a wall clock stepped back or
	// forth neither extends a hold nor starts pressure early.
	epoch time.Time
	// aboveSince is since when every look found the age above target (at);
	// 0 when the last did not. Atomic: every delivery looks, and the
	// ingest path takes no lock for it.
	aboveSince atomic.Int64
	// overloadUntil is until when the shorter limit holds after the last
	// delivery refused (at); 0: no hold.
	overloadUntil atomic.Int64
	// refused counts the deliveries refused at once (refuse); holds, the
	// holds of the shorter limit begun (a refusal with none in force);
	// arrived, the deliveries that reached the store's door (refuse), the
	// offered rate (surgeMeter); surges, the surges begun (RunPressure).
	refused, holds, arrived, surges atomic.Int64
}

// newShedder returns a shedder with these limits (ingest.Options' of the
// same names), its clock starting now.
func newShedder(after, target, interval, overload time.Duration, surge float64) *shedder {
	return &shedder{after: after, target: target, interval: interval, overload: overload, surge: surge, epoch: time.Now()}
}

// at returns now as kept in the atomics: nanoseconds since epoch, plus
// one so that no time is 0 (none).
func (s *shedder) at(now time.Time) int64 { return int64(now.Sub(s.epoch)) + 1 }

// note records one look at the age, now: at or under target it ends the
// count, above it starts one if none runs.
func (s *shedder) note(age time.Duration, now time.Time) {
	switch {
	case age <= s.target:
		if s.aboveSince.Load() != 0 {
			s.aboveSince.Store(0)
		}
	case s.aboveSince.Load() == 0:
		s.aboveSince.CompareAndSwap(0, s.at(now))
	}
}

// refuse reports whether a delivery that finds the queue age at age, now,
// is refused, and notes the age for pressure.
func (s *shedder) refuse(age time.Duration, now time.Time) bool {
	s.arrived.Add(1)
	if s.target > 0 {
		s.note(age, now)
	}
	if s.after <= 0 {
		return false
	}
	limit := s.limit(now)
	if age <= limit {
		return false
	}
	s.refused.Add(1)
	if s.overload > 0 {
		// The latest hold wins: a refusal decided a moment earlier on
		// another goroutine must not shorten it.
		t := s.at(now)
		until := t + int64(overloadHold)
		for cur := s.overloadUntil.Load(); until > cur; cur = s.overloadUntil.Load() {
			if s.overloadUntil.CompareAndSwap(cur, until) {
				if cur <= t {
					s.holds.Add(1) // none was in force: a hold begins
				}
				break
			}
		}
	}
	return true
}

// limit returns the store queue age past which a delivery arriving now is
// refused: overload within overloadHold of the last refusal, after
// otherwise.
func (s *shedder) limit(now time.Time) time.Duration {
	if s.overload > 0 && s.at(now) < s.overloadUntil.Load() {
		return s.overload
	}
	return s.after
}

// pressure reports whether the age has stood above target for interval, as
// of now; age is the queue age now (no delivery may have arrived lately,
// and one held delivery can be the whole queue: this look counts too).
func (s *shedder) pressure(age time.Duration, now time.Time) bool {
	if s.target <= 0 {
		return false
	}
	s.note(age, now)
	since := s.aboveSince.Load()
	return since != 0 && s.at(now)-since >= int64(s.interval)
}

// RunPressure checks the pressure every interval until ctx ends and,
// while there is some, notifies envelope.PressureChannel once per check
// (a NOTIFY is a few microseconds of the database's time; workers raise
// their limit after a silence of 300 ms and lift it after 2 s). When
// deliveries were refused since the last check (the store behind), the
// notification says so (envelope.PressureRefusing), pressure or not:
// workers then yield even when they keep up (until the notification is
// sent, every check tries again). Otherwise, under pressure while more is
// offered than surge times the calm rate (surgeMeter), it says that
// (envelope.PressureSurge): workers yield at once, keeping up or not.
// With no pressure target nothing is notified, refusals included. set, when not nil, is told
// the pressure at each check (the inbox_ingest_store_pressure gauge).
func (s *Server) RunPressure(ctx context.Context, set func(bool)) {
	if s.shed.target <= 0 {
		return
	}
	pool := s.store.Pool()
	t := time.NewTicker(s.shed.interval)
	defer t.Stop()
	var failedAt time.Time
	refused := s.shed.refused.Load()
	surge := newSurgeMeter(s.shed.surge, s.shed.interval, s.shed.arrived.Load(), time.Now())
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			// Read now, not the tick's time: after a NOTIFY that blocked
			// (under pressure, up to a second) the queued tick is old, and
			// the arrivals counted since would look like a burst.
			now := time.Now()
			on := s.shed.pressure(s.store.QueueAge(), now)
			if set != nil {
				set(on)
			}
			surging, begun := surge.look(s.shed.arrived.Load(), on, now)
			if surge.known && !s.shed.calmKnown.Load() {
				s.shed.calmKnown.Store(true)
			}
			if begun {
				s.shed.surges.Add(1)
			}
			payload := ""
			n := s.shed.refused.Load()
			switch {
			case n != refused:
				payload = envelope.PressureRefusing
			case surging:
				payload = envelope.PressureSurge
			case on:
			default:
				continue
			}
			// A second at least: a timed-out statement costs the pool its
			// connection, and under pressure the database is slow to answer.
			// The ticker drops the checks this one overruns.
			nctx, cancel := context.WithTimeout(ctx, max(s.shed.interval, time.Second))
			_, err := pool.Exec(nctx, "SELECT pg_notify($1, $2)", envelope.PressureChannel, payload)
			cancel()
			if err == nil {
				refused = n // refusals not told yet are told at the next check
			}
			if err != nil && ctx.Err() == nil && now.Sub(failedAt) > time.Minute {
				// Under pressure the database may be slow to answer: the
				// next check tries again. Said once a minute at most.
				failedAt = now
				s.logger.Warn("could not notify workers of store pressure", "error", err)
			}
		}
	}
}

// surgeWindow is the span over which the offered rate is measured: long
// enough to smooth a batch, short enough that a step in the load is seen
// within its first half second. surgeCalm is the time constant of the
// calm rate: a load that stood for about that long without pressure is
// the one the store keeps up with. surgeSettle is its time constant under
// pressure: a load that stood that long is the new calm even if the store
// stays a little behind it, so a surge ends (a step to twice the calm rate
// after about 2 s, to three times after about 3.5 s) and workers keeping
// up are not held at their floor for as long as the pressure lasts.
// surgeMinRate is the least rate offered that can be a surge: under it
// (a trickle, or a first blip after the calm rate decayed while idle) a
// worker at its full rate costs intake little, and pressure there comes
// from a checkpoint or a vacuum, not the load. surgeLearn is how long a
// new ingest that found no load waits before it takes what is offered
// (about 0 when idle) as its calm rate (surgeMeter.look).
const (
	surgeWindow  = 500 * time.Millisecond
	surgeCalm    = time.Second
	surgeSettle  = 5 * time.Second
	surgeMinRate = 100
	surgeLearn   = 5 * time.Second
)

// surgeMeter tells a step in the offered load from a load the store keeps
// up with: at each pressure check it measures the deliveries offered a
// second over surgeWindow (or since the check before, when checks come
// further apart) and keeps the calm rate, their moving average over the
// checks without pressure. Under pressure, an offered rate over
// ratio times the calm rate is a surge (a sale starting, a provider's
// backlog arriving at once): a worker at its full rate then costs intake
// the most, and one that yields only once it is behind yields a second or
// more too late. At a rate the store sustains, pressure comes from a
// checkpoint or a blip, and the rate offered is the calm one: no surge.
// Under pressure the calm rate moves five times slower (surgeSettle), so a
// surge lasts until a check finds no pressure, the rate offered falls
// back, or the new rate has stood a few seconds (or ingest refuses
// deliveries, which workers are told instead). A rate under surgeMinRate
// is never a surge. A new meter knows no calm rate until it has measured a
// window under load, or none for surgeLearn (look).
type surgeMeter struct {
	ratio float64 // <= 0: never a surge
	calm  float64
	// The offered count at the last n checks (n: enough at the pressure
	// interval for one a whole window old), a ring; i is the oldest.
	counts []int64
	times  []time.Time
	i      int
	// surgedAt is the latest check that found a surge; quietSince, the
	// first since then that found none (zero: the latest found one, or
	// none ever did).
	surgedAt, quietSince time.Time
	// loadedSince is since when every check found a load (surgeMinRate
	// or more offered over the window, and some since the check before),
	// while the calm rate is not known yet (known); zero when the latest
	// found none. born is when the meter was made.
	loadedSince, born time.Time
	known             bool
}

// newSurgeMeter returns a surgeMeter with this ratio for checks every
// interval, the offered count being count now.
func newSurgeMeter(ratio float64, interval time.Duration, count int64, now time.Time) *surgeMeter {
	n := int((surgeWindow+interval-1)/interval) + 1 // a check a whole window old, and the current one
	m := &surgeMeter{ratio: ratio, counts: make([]int64, n), times: make([]time.Time, n), born: now}
	for j := range m.counts {
		m.counts[j], m.times[j] = count, now
	}
	return m
}

// follow moves x toward target as an exponential average with time
// constant tau over dt: the same weight per second however often it is
// called (a check that a slow NOTIFY delayed weighs what it spans).
func follow(x, target float64, dt, tau time.Duration) float64 {
	return x + (1-math.Exp(-dt.Seconds()/tau.Seconds()))*(target-x)
}

// look records a check at now, count deliveries having been offered so
// far and pressure on or not. It reports whether the check finds a surge,
// and whether that surge begins here: none was found before, or the first
// check since the last one that did to find none came surgeCalm or more
// before this one (one without pressure inside a surge does not make two,
// and checks a second apart that each find it, each NOTIFY having
// blocked, do not make one each).
func (m *surgeMeter) look(count int64, pressure bool, now time.Time) (surge, begun bool) {
	// The window starts at the newest check at least surgeWindow old (the
	// previous one when checks came slower than that: a NOTIFY that
	// blocked), so the rate offered is the last half second's, or the
	// last check's, not that of as many checks as fill a window at
	// --pressure-interval.
	n := len(m.counts)
	prev := (m.i + n - 1) % n // the check before this one (the meter's making, at first)
	step, lastCount := max(now.Sub(m.times[prev]), 0), m.counts[prev]
	oldC, oldT := m.counts[m.i], m.times[m.i]
	for k := 1; k <= n; k++ {
		j := (m.i + n - k) % n // newest first
		if now.Sub(m.times[j]) >= surgeWindow {
			oldC, oldT = m.counts[j], m.times[j]
			break
		}
	}
	m.counts[m.i], m.times[m.i] = count, now
	m.i = (m.i + 1) % n
	dt := now.Sub(oldT).Seconds()
	if dt <= 0 {
		return false, false
	}
	offered := float64(count-oldC) / dt
	if !m.known {
		// A new ingest knows no calm rate: its zero is not an idle spell
		// (in a rolling restart, or a replica added, the load was there
		// before it). The first window measured wholly under a load is the
		// calm rate (a window's worth after the first to find the load);
		// no surge before. One whose check finds under surgeMinRate once
		// surgeLearn has passed is idle, or nearly: that rate is its calm
		// one.
		switch {
		case offered < surgeMinRate:
			m.loadedSince = time.Time{}
			if now.Sub(m.born) >= surgeLearn {
				// No load held a window since the start: idle, or a
				// trickle, and what is offered now is the calm rate.
				m.calm, m.known = offered, true
			}
		case count == lastCount:
			// A pause: the window still holds the load before it.
			m.loadedSince = time.Time{}
		case m.loadedSince.IsZero():
			m.loadedSince = now
		case now.Sub(m.loadedSince) >= surgeWindow:
			m.calm, m.known = offered, true
		}
		return false, false
	}
	if !pressure {
		m.calm = follow(m.calm, offered, step, surgeCalm)
	} else {
		surge = m.ratio > 0 && offered >= surgeMinRate && offered > m.ratio*m.calm
		m.calm = follow(m.calm, offered, step, surgeSettle)
	}
	switch {
	case surge:
		begun = m.surgedAt.IsZero() || (!m.quietSince.IsZero() && now.Sub(m.quietSince) >= surgeCalm)
		m.surgedAt, m.quietSince = now, time.Time{}
	case !m.surgedAt.IsZero() && m.quietSince.IsZero():
		m.quietSince = now
	}
	return surge, begun
}
