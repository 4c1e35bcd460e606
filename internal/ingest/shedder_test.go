package ingest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The shedder lets a blip through (an age past the limit but not twice it),
// refuses past twice the limit, and once refusing refuses past the limit
// itself until shedCalm passes without a refusal.
func TestShedderToldABlipFromABacklog(t *testing.T) {
	t.Parallel()
	const limit = 250 * time.Millisecond
	t0 := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	type step struct {
		at       time.Duration // since t0
		age      time.Duration
		refuse   bool
		shedding bool // after the step
	}
	for name, steps := range map[string][]step{
		"under the limit, never": {
			{0, limit, false, false},
			{time.Millisecond, 0, false, false},
		},
		"a blip queues": {
			{0, limit + time.Millisecond, false, false},
			{100 * time.Millisecond, 2 * limit, false, false},
			{200 * time.Millisecond, 0, false, false},
		},
		"past twice the limit refuses, then the limit itself": {
			{0, 2*limit + time.Millisecond, true, true},
			{shedCalm / 2, limit + time.Millisecond, true, true},
			// shedCalm after the last refusal, not the first
			{shedCalm + shedCalm/4, limit + time.Millisecond, true, true},
			{shedCalm + shedCalm/2, limit, false, true},
		},
		"calm for shedCalm ends the shedding": {
			{0, 3 * limit, true, true},
			{shedCalm / 2, limit / 2, false, true},
			// under the limit does not extend it: calm since the refusal at 0
			{shedCalm, limit + time.Millisecond, false, false},
			{shedCalm + time.Millisecond, 2 * limit, false, false},
			{shedCalm + 2*time.Millisecond, 2*limit + time.Millisecond, true, true},
		},
		"an earlier start does not end the shedding sooner": {
			{5 * time.Second, 2*limit + time.Millisecond, true, true},
			{4 * time.Second, 2*limit + time.Millisecond, true, true},
			{5*time.Second + shedCalm - time.Millisecond, limit + time.Millisecond, true, true},
		},
		"a stall refuses throughout": {
			{0, 2*limit + time.Millisecond, true, true},
			{3 * time.Second, 3*time.Second + 2*limit, true, true},
			{6 * time.Second, 6*time.Second + 2*limit, true, true},
		},
	} {
		t.Run(name, func(t *testing.T) {
			s := &shedder{limit: limit}
			var blips int64 // let through while past the limit
			for i, st := range steps {
				require.Equal(t, st.refuse, s.refuse(st.age, at(st.at)), "step %d: age %s", i, st.age)
				require.Equal(t, st.shedding, s.shedding(at(st.at)), "step %d: shedding", i)
				if st.age > limit && !st.refuse {
					blips++
				}
			}
			require.Equal(t, blips, s.blips.Load())
		})
	}
	for _, limit := range []time.Duration{0, -time.Second} {
		s := &shedder{limit: limit}
		require.False(t, s.refuse(time.Hour, t0), "limit %s: never refuses", limit)
		require.False(t, s.shedding(t0))
	}
}
