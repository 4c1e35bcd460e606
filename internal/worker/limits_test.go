package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/inboxhq/inbox/internal/envelope"
	"github.com/inboxhq/inbox/internal/handlers"
	"github.com/inboxhq/inbox/internal/webhooktest"
	"github.com/inboxhq/inbox/internal/worker"
)

// A source's max_attempts lower than the job's own (River's default 25, as
// for a replayed job) is when the envelope fails "attempts exhausted", and
// River stops too (the job is cancelled, not retried to its own limit).
func TestSourceMaxAttemptsBoundsRetries(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var calls atomic.Int32
	b.registry.Register("standard", "payment.succeeded", flaky(100, &calls))
	b.runConfig(t, worker.Config{Sources: map[string]worker.SourcePolicy{"src": {MaxAttempts: 2}}, ReconcileEvery: -1})
	id := b.insert(t, "standard", "msg_src_limit", "payment.succeeded", webhooktest.StandardPayment("pay_l", "m_l", 100, "USD"), 0)
	e := b.waitFinal(t, id)
	require.Equal(t, envelope.StatusFailed, e.Status)
	require.Contains(t, *e.LastError, "attempts exhausted (2 of 2)")
	require.Equal(t, 2, e.Attempts)
	require.Equal(t, []string{"retry", "failed"}, b.outcomes(t, id))
	state, attempt := b.jobState(t, id)
	require.Equal(t, "cancelled", state, "River must stop at the source's limit")
	require.Equal(t, 2, attempt)
	require.EqualValues(t, 2, calls.Load())
}

// A downstream's Retry-After longer than MaxSnooze waits MaxSnooze, not
// what it asked (an hour here: the test would time out).
func TestRetryAfterIsCappedAtMaxSnooze(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var calls atomic.Int32
	b.registry.Register("github", "*", handlers.HandlerFunc(func(context.Context, handlers.Run) (json.RawMessage, error) {
		if calls.Add(1) == 1 {
			return nil, &handlers.RetryAfterError{Err: errors.New("downstream says wait"), After: time.Hour}
		}
		return json.RawMessage(`{"ok":true}`), nil
	}))
	b.runConfig(t, worker.Config{Policy: worker.Policy{MaxSnooze: 300 * time.Millisecond}, ReconcileEvery: -1})
	id := b.insert(t, "github", "gh-capped", "push", webhooktest.GitHubPush("refs/heads/main"), 0)
	e := b.waitFinal(t, id)
	require.Equal(t, envelope.StatusDone, e.Status)
	require.Equal(t, []string{"snoozed", "done"}, b.outcomes(t, id))
	var gap float64
	require.NoError(t, b.pool.QueryRow(context.Background(), `
		SELECT extract(epoch FROM max(started_at) - min(finished_at))::float8 FROM envelope_attempt WHERE envelope_id = $1`, id).Scan(&gap))
	require.GreaterOrEqual(t, gap, 0.25, "the snooze lasted MaxSnooze")
}
