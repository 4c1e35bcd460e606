package worker

import (
	"testing"
	"time"

	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"
)

func TestBackoffDoublesAndCaps(t *testing.T) {
	t.Parallel()
	within := func(got, want time.Duration) {
		t.Helper()
		require.InDelta(t, float64(want), float64(got), float64(want)/10+1, "got %s want %s", got, want)
	}
	within(backoff(time.Second, time.Minute, 1), time.Second)
	within(backoff(time.Second, time.Minute, 3), 4*time.Second)
	within(backoff(time.Second, time.Minute, 20), time.Minute)
}

func TestRetryPolicyPerSource(t *testing.T) {
	t.Parallel()
	fallback := fixedPolicy(time.Hour)
	p := &retryPolicy{sources: map[string]SourcePolicy{"fast": {BackoffMin: time.Second, BackoffMax: 2 * time.Second}}, fallback: fallback}
	fast := p.NextRetry(&rivertype.JobRow{Attempt: 5, EncodedArgs: []byte(`{"envelope_id":1,"source":"fast"}`)})
	require.WithinDuration(t, time.Now().Add(2*time.Second), fast, 500*time.Millisecond)
	other := p.NextRetry(&rivertype.JobRow{Attempt: 5, EncodedArgs: []byte(`{"envelope_id":1,"source":"other"}`)})
	require.WithinDuration(t, time.Now().Add(time.Hour), other, time.Second)
}

type fixedPolicy time.Duration

func (f fixedPolicy) NextRetry(*rivertype.JobRow) time.Time { return time.Now().Add(time.Duration(f)) }
