package worker

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/inboxhq/inbox/internal/envelope"
	"github.com/inboxhq/inbox/internal/provider"
)

// SourcePolicy is what a source configures about processing.
type SourcePolicy struct {
	// BackoffMin and BackoffMax bound the wait between retries: BackoffMin
	// doubled per attempt, capped at BackoffMax, with 10% jitter. Zero keeps
	// the client's default policy.
	BackoffMin, BackoffMax time.Duration
	// ThrottlePerSecond limits envelopes processed per key and second across
	// every worker process; 0 means unlimited.
	ThrottlePerSecond int
	// ThrottleKey is "merchant" (default) or "source".
	ThrottleKey string
	// MaxAttempts, when set and lower than the job's own max_attempts, is
	// when the envelope fails "attempts exhausted". The worker's decision
	// (decide) is the one place that applies it, to every job however it
	// was enqueued (replayed and reconciled jobs have River's default; see
	// envelope.ProcessJob).
	MaxAttempts int
	// MaxAge, when set, bounds snoozing for the source's envelopes instead
	// of the policy's MaxAge and the provider's retry window (see maxAge).
	MaxAge time.Duration
	// AccountID is the provider account the source's deliveries belong to
	// (the sources file's account_id): handlers.Run.Account, and the
	// merchant of the throttle key, when the payload names none.
	AccountID string
}

// retryWindowSlack is added to a provider's retry window when it bounds a
// snooze: a refund gives up only after its payment's last possible retry.
const retryWindowSlack = time.Hour

// maxAge is how long an envelope of provider may keep snoozing: the source's
// own max_age when it sets one, else the policy's MaxAge, but never less
// than the provider's retry window (plus an hour), as the event it waits
// for may arrive that late (Stripe retries for 3 days, Shopify for 4 h).
func maxAge(p Policy, sp SourcePolicy, providerName string) time.Duration {
	if sp.MaxAge > 0 {
		return sp.MaxAge
	}
	if w := provider.RetryWindow(providerName); w > 0 {
		return max(p.MaxAge, w+retryWindowSlack)
	}
	return p.MaxAge
}

// policyFor is the policy for env's attempts: w.Policy with its MaxAge
// per source and provider (see maxAge).
func (w *ProcessWorker) policyFor(env *envelope.Envelope) Policy {
	p := w.Policy
	p.MaxAge = maxAge(p, w.Sources[env.Source], env.Provider)
	return p
}

// throttledError is a throttle slot refused: the job waits for a window.
type throttledError struct {
	key  string
	wait time.Duration
	rate int
}

func (e *throttledError) Error() string {
	return fmt.Sprintf("throttled: %s is over %d/s", e.key, e.rate)
}

// retryPolicy applies a source's backoff, else the fallback.
type retryPolicy struct {
	sources  map[string]SourcePolicy
	fallback river.ClientRetryPolicy
}

// NextRetry implements river.ClientRetryPolicy.
func (p *retryPolicy) NextRetry(job *rivertype.JobRow) time.Time {
	var args struct {
		Source string `json:"source"`
	}
	_ = json.Unmarshal(job.EncodedArgs, &args)
	sp, ok := p.sources[args.Source]
	if !ok || sp.BackoffMin <= 0 {
		return p.fallback.NextRetry(job)
	}
	return time.Now().Add(backoff(sp.BackoffMin, sp.BackoffMax, job.Attempt))
}

// backoff is min * 2^(attempt-1), capped at max, +-10% jitter.
func backoff(minWait, maxWait time.Duration, attempt int) time.Duration {
	if maxWait < minWait {
		maxWait = minWait
	}
	d := minWait
	for i := 1; i < attempt && d < maxWait; i++ {
		d *= 2
	}
	d = min(d, maxWait)
	jitter := time.Duration(float64(d) * 0.1 * (2*rand.Float64() - 1))
	return d + jitter
}

// takeThrottleSlot counts one envelope for key in the current one-second
// window (the database's clock, shared by every worker process) and returns
// how long to wait when the window is already full, and the database's time
// of the count (the attempt's start: the window it counts in).
func takeThrottleSlot(ctx context.Context, pool *pgxpool.Pool, key string, perSecond int) (time.Duration, time.Time, error) {
	var count int
	var waitSeconds float64
	var now time.Time
	err := pool.QueryRow(ctx, `
		WITH w AS (SELECT date_trunc('second', clock_timestamp()) AS start)
		INSERT INTO throttle_window AS t (key, window_start, count)
		SELECT $1, w.start, 1 FROM w
		ON CONFLICT (key, window_start) DO UPDATE SET count = t.count + 1
		RETURNING t.count, extract(epoch FROM t.window_start + interval '1 second' - clock_timestamp())::float8, clock_timestamp()`, key).Scan(&count, &waitSeconds, &now)
	if err != nil {
		return 0, now, fmt.Errorf("throttle %s: %w", key, err)
	}
	if count <= perSecond {
		return 0, now, nil
	}
	// Spread the waiters over the next window instead of waking together.
	wait := time.Duration(max(waitSeconds, 0) * float64(time.Second))
	over := count - perSecond
	spread := time.Duration((over-1)/perSecond) * time.Second
	return wait + spread + time.Duration(rand.Int64N(int64(50*time.Millisecond))), now, nil
}

// sweepThrottle deletes windows older than a minute.
func sweepThrottle(ctx context.Context, pool *pgxpool.Pool) error {
	_, err := pool.Exec(ctx, `DELETE FROM throttle_window WHERE window_start < now() - interval '1 minute'`)
	return err
}
