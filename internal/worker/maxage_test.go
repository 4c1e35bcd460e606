package worker

import (
	"errors"
	"testing"
	"time"

	"github.com/riverqueue/river/rivertype"

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
		if got := maxAge(p, c.sp, c.provider); got != c.want {
			t.Errorf("maxAge(%s, %+v) = %s, want %s", c.provider, c.sp, got, c.want)
		}
	}
	long := p
	long.MaxAge = 10 * 24 * time.Hour
	if got := maxAge(long, SourcePolicy{}, "stripe"); got != long.MaxAge {
		t.Errorf("a longer --max-age is kept: got %s", got)
	}

	// Two and a half days in, a Stripe refund still snoozes; at 24 h it
	// would have failed before.
	notReady := &handlers.NotReadyError{Err: errors.New("payment not posted")}
	w := &ProcessWorker{Policy: p}
	act := decideFailure(notReady, 1, 25, 60*time.Hour, w.policyFor(&envelope.Envelope{Provider: "stripe", Source: "s"}))
	if act.outcome != envelope.OutcomeSnoozed {
		t.Errorf("stripe refund at 60 h: %s (%s), want snoozed", act.outcome, act.reason)
	}
	act = decideFailure(notReady, 1, 25, 74*time.Hour, w.policyFor(&envelope.Envelope{Provider: "stripe", Source: "s"}))
	if act.outcome != envelope.OutcomeFailed || !act.final {
		t.Errorf("stripe refund at 74 h: %s, want failed", act.outcome)
	}
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
		if act.outcome != envelope.OutcomeSnoozed {
			t.Fatalf("age %s: %s", c.age, act.outcome)
		}
		if got := snoozeOf(t, act.river); got != c.want {
			t.Errorf("age %s: snooze %s, want %s", c.age, got, c.want)
		}
	}
}

func snoozeOf(t *testing.T, err error) time.Duration {
	t.Helper()
	var se *rivertype.JobSnoozeError
	if !errors.As(err, &se) {
		t.Fatalf("%v is not a snooze", err)
	}
	return se.Duration
}
