package worker

import (
	"errors"
	"testing"
	"time"

	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/inboxhq/inbox/internal/envelope"
	"github.com/inboxhq/inbox/internal/handlers"
)

// A refund waiting for its payment keeps waiting at least as long as the
// provider retries the payment's delivery: Stripe 3 days, Shopify 4 h,
// Standard Webhooks (Svix's schedule) about 27.6 h; a source's max_age
// overrides it either way.
func TestMaxAgeCoversTheProvidersRetryWindow(t *testing.T) {
	t.Parallel()
	p := DefaultPolicy // MaxAge 24 h
	for _, c := range []struct {
		provider string
		sp       SourcePolicy
		want     time.Duration
	}{
		{"stripe", SourcePolicy{}, 73 * time.Hour},
		{"shopify", SourcePolicy{}, 24 * time.Hour}, // 4 h + 1 h is under the policy's 24 h
		{"standard", SourcePolicy{}, 28*time.Hour + 35*time.Minute + 5*time.Second},
		{"github", SourcePolicy{}, 24 * time.Hour},
		{"stripe", SourcePolicy{MaxAge: 5 * 24 * time.Hour}, 5 * 24 * time.Hour},
		{"stripe", SourcePolicy{MaxAge: time.Hour}, time.Hour},
	} {
		assert.Equal(t, c.want, maxAge(p, c.sp, c.provider), "maxAge(%s, %+v)", c.provider, c.sp)
	}
	long := p
	long.MaxAge = 10 * 24 * time.Hour
	assert.Equal(t, long.MaxAge, maxAge(long, SourcePolicy{}, "stripe"), "a longer --max-age is kept")

	// Two and a half days in, a Stripe refund still snoozes; at 24 h it
	// would have failed before.
	notReady := &handlers.NotReadyError{Err: errors.New("payment not posted")}
	w := &ProcessWorker{Policy: p}
	act := decideFailure(notReady, 1, 25, 60*time.Hour, w.policyFor(&envelope.Envelope{Provider: "stripe", Source: "s"}))
	assert.Equal(t, envelope.OutcomeSnoozed, act.outcome, "stripe refund at 60 h (%s)", act.reason)
	act = decideFailure(notReady, 1, 25, 74*time.Hour, w.policyFor(&envelope.Envelope{Provider: "stripe", Source: "s"}))
	assert.Equal(t, envelope.OutcomeFailed, act.outcome, "stripe refund at 74 h")
	assert.True(t, act.final, "stripe refund at 74 h: final")
}

// A not-ready envelope with no wait of its own waits a tenth of its age (at
// least the default, at most MaxSnooze): days of waiting are hundreds of
// wake-ups, not tens of thousands.
func TestNotReadySnoozeGrowsWithAge(t *testing.T) {
	t.Parallel()
	p := DefaultPolicy
	p.MaxAge = 100 * time.Hour
	notReady := &handlers.NotReadyError{Err: errors.New("payment not posted")}
	for _, c := range []struct{ age, want time.Duration }{
		{0, p.SnoozeDefault},
		{time.Minute, p.SnoozeDefault},
		{10 * time.Minute, time.Minute},
		{10 * time.Hour, p.MaxSnooze},
	} {
		act := decideFailure(notReady, 1, 25, c.age, p)
		require.Equal(t, envelope.OutcomeSnoozed, act.outcome, "age %s", c.age)
		assert.Equal(t, c.want, snoozeOf(t, act.river), "age %s: snooze", c.age)
	}
}

func snoozeOf(t *testing.T, err error) time.Duration {
	t.Helper()
	var se *rivertype.JobSnoozeError
	require.ErrorAs(t, err, &se, "a snooze")
	return se.Duration
}
