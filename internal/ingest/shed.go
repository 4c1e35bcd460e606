package ingest

import (
	"sync"
	"sync/atomic"
	"time"
)

// shedCalm is how long a shedder that has started refusing must go
// without a refusal (every delivery arriving found the store queue age at
// or under the limit) before it lets a blip through again. An overload
// comes in waves (the queue drains while refusals last, then fills
// again): a calm of a second let each wave grow to twice the limit before
// refusals began, and at 1.2x the sustainable rate the extra deliveries in
// flight filled --max-conns (docs/benchmarks.md, "Blips are not
// overload").
const shedCalm = 10 * time.Second

// shedder decides from the store queue age (how long the oldest delivery
// being stored has waited) whether a new delivery is refused at once. It
// tells a database that is behind (a stalled disk, a held lock, more
// offered than it commits) from a blip (one slow commit while an
// autovacuum, a checkpoint or a GIN merge takes a shared core): a blip
// lets the oldest delivery wait past the limit for a moment, then the
// queue drains and every delivery makes its deadline; refusing during it
// only costs providers a retry. So:
//
//   - an age past twice the limit refuses (the queue has been past the
//     limit for a whole limit more: not a moment);
//   - once refusing, an age past the limit itself refuses, until shedCalm
//     passes without a refusal: under a standing overload the queue stays
//     at the limit, as it did before blips were let through;
//   - an age past the limit but not twice it, with no refusal in the last
//     shedCalm, is a blip: the delivery queues.
//
// A zero or negative limit never refuses.
type shedder struct {
	limit time.Duration

	mu sync.Mutex
	// until is when shedding at the limit stops (zero: not shedding):
	// shedCalm after the last refusal.
	until time.Time
	// blips counts the deliveries let through in a blip.
	blips atomic.Int64
}

// refuse says whether a delivery arriving at now, with the store queue
// age age, is refused.
func (s *shedder) refuse(age time.Duration, now time.Time) bool {
	if s.limit <= 0 || age <= s.limit {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if age > 2*s.limit || now.Before(s.until) {
		// Requests reach the lock out of order: an earlier start must
		// not end the shedding sooner.
		if u := now.Add(shedCalm); u.After(s.until) {
			s.until = u
		}
		return true
	}
	s.blips.Add(1)
	return false
}

// shedding says whether the shedder refuses at the limit itself at now.
func (s *shedder) shedding(now time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return now.Before(s.until)
}
