package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/inboxhq/inbox/internal/envelope"
	"github.com/inboxhq/inbox/internal/handlers"
	"github.com/inboxhq/inbox/internal/webhooktest"
	"github.com/inboxhq/inbox/internal/worker"
)

// hookedError runs hook the first time its text is read. A worker reads a
// failed attempt's error text only to report it, after rolling back the
// attempt's transaction: the hook runs in the window between the rollback
// and the report, where a paused (stale) worker would be paused.
type hookedError struct {
	err  error
	once sync.Once
	hook func()
}

func (e *hookedError) Error() string { e.once.Do(e.hook); return e.err.Error() }
func (e *hookedError) Unwrap() error { return e.err }

// startClient starts a worker client with one slot (so it takes no other
// job while its only attempt is paused) and returns it; it stops when the
// test ends.
func (b *bundle) startClient(t *testing.T) *river.Client[pgx.Tx] {
	t.Helper()
	client := b.newClient(t)
	require.NoError(t, client.Start(context.Background()))
	return client
}

// newClient is startClient without the start.
func (b *bundle) newClient(t *testing.T) *river.Client[pgx.Tx] {
	t.Helper()
	client, err := worker.NewClient(b.pool, b.registry, worker.Config{
		MaxWorkers:        1,
		FetchCooldown:     5 * time.Millisecond,
		FetchPollInterval: 20 * time.Millisecond,
		RetryPolicy:       fastRetry{},
		ReconcileEvery:    -1,
	}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = client.Stop(ctx)
	})
	return client
}

// stopClient stops c and waits for its running attempts to return.
func stopClient(t *testing.T, c *river.Client[pgx.Tx]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	require.NoError(t, c.Stop(ctx))
}

type envelopeState struct {
	Status    string
	Attempts  int
	LastError *string
	Outcomes  []string
}

func (b *bundle) state(t *testing.T, id int64) envelopeState {
	t.Helper()
	var s envelopeState
	require.NoError(t, b.pool.QueryRow(context.Background(), `
		SELECT status, attempts, last_error,
		       coalesce((SELECT array_agg(outcome ORDER BY id) FROM envelope_attempt WHERE envelope_id = e.id), '{}')
		  FROM envelope e WHERE id = $1`, id).Scan(&s.Status, &s.Attempts, &s.LastError, &s.Outcomes))
	return s
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(deadline time.Duration, cond func() (bool, error)) error {
	end := time.Now().Add(deadline)
	for {
		ok, err := cond()
		if err != nil || ok {
			return err
		}
		if time.Now().After(end) {
			return errors.New("timed out")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A stale attempt's failure must not overwrite a later attempt's result.
// Attempt 1 (worker A) runs the handler, which fails; after A rolled back
// and before it reports the failure, A is paused; meanwhile the job is
// rescued and attempt 2 (worker B) processes the envelope to done. When A
// resumes, its report must change nothing: the envelope stays done, with
// attempt 2's result and no failure on its trail. The worker's fence on the
// job row and the compare-and-set on the envelope each guard this; the test
// fails when both are gone.
func TestStaleAttemptsFailureDoesNotOverwriteDone(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name        string
		fail        error // what attempt 1's handler returns
		maxAttempts int
	}{
		{"permanent", &handlers.PermanentError{Err: errors.New("stale: bad payload")}, 0},
		{"transient", errors.New("stale: downstream hiccup"), 0},
		{"transient on the last attempt", errors.New("stale: downstream hiccup"), 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			inner, _ := handlers.Builtin().Lookup("standard", "payment.succeeded")
			var calls atomic.Int32
			var hookErr error
			var b2 *river.Client[pgx.Tx] // worker B, started by the hook
			var jobID int64
			ctx := context.Background()
			hook := func() {
				// The rescue: River makes the job available again (the next
				// fetch makes it attempt 2), and another worker takes it.
				_, hookErr = b.pool.Exec(ctx, `UPDATE river_job SET state = 'available', scheduled_at = now() WHERE id = $1 AND state = 'running'`, jobID)
				if hookErr != nil {
					return
				}
				if hookErr = b2.Start(ctx); hookErr != nil {
					return
				}
				hookErr = waitFor(15*time.Second, func() (bool, error) {
					var done bool
					err := b.pool.QueryRow(ctx, `SELECT e.status = 'done' AND j.state = 'completed' AND j.attempt = 2
						FROM envelope e, river_job j WHERE j.id = $1 AND e.id = (j.args->>'envelope_id')::bigint`, jobID).Scan(&done)
					return done, err
				})
				if hookErr != nil {
					hookErr = fmt.Errorf("attempt 2 did not finish the envelope while attempt 1 was paused before its report "+
						"(does the worker read the error text while it still holds the envelope?): %w", hookErr)
				}
			}
			b.registry.Register("standard", "payment.succeeded", handlers.HandlerFunc(func(ctx context.Context, tx pgx.Tx, env *envelope.Envelope) (json.RawMessage, error) {
				if calls.Add(1) == 1 {
					// Its effects are written, then rolled back with the failure.
					if _, err := inner.Handle(ctx, tx, env); err != nil {
						return nil, err
					}
					return nil, &hookedError{err: tc.fail, hook: hook}
				}
				return inner.Handle(ctx, tx, env)
			}))
			b2 = b.newClient(t)
			id := b.insert(t, "standard", "msg_stale_"+tc.name, "payment.succeeded", webhooktest.StandardPayment("pay_stale", "m_stale", 500, "USD"), tc.maxAttempts)
			require.NoError(t, b.pool.QueryRow(ctx, `SELECT id FROM river_job WHERE (args->>'envelope_id')::bigint = $1`, id).Scan(&jobID))

			a := b.startClient(t)
			require.NoError(t, waitFor(20*time.Second, func() (bool, error) { return calls.Load() >= 2, nil }), "attempt 2 never ran")
			stopClient(t, a) // attempt 1 has returned: its report is written or refused
			require.NoError(t, hookErr)
			stopClient(t, b2)

			s := b.state(t, id)
			require.Equal(t, "done", s.Status, "a stale attempt's failure overwrote done")
			require.Nil(t, s.LastError, "a stale attempt's error was recorded on a done envelope")
			require.Equal(t, 1, s.Attempts)
			require.Equal(t, []string{"done"}, s.Outcomes)
			require.Equal(t, 1, b.count(t, `SELECT count(*) FROM ledger_transaction WHERE envelope_id = $1`, id))
			var state string
			require.NoError(t, b.pool.QueryRow(ctx, `SELECT state::text FROM river_job WHERE id = $1`, jobID).Scan(&state))
			require.Equal(t, "completed", state)
		})
	}
}

// The fence alone: attempt 1's handler fails, and before attempt 1 reports,
// the job was rescued and is now running as attempt 2 on another worker,
// which has not finished yet (the envelope is still pending, so the
// envelope's compare-and-set cannot help). Attempt 1's report must change
// nothing: it no longer owns the job.
func TestStaleAttemptsFailureReportIsFencedOff(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		fail error
	}{
		{"permanent", &handlers.PermanentError{Err: errors.New("stale: bad payload")}},
		{"transient", errors.New("stale: downstream hiccup")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			ctx := context.Background()
			var jobID int64
			var hookErr error
			var calls atomic.Int32
			b.registry.Register("github", "*", handlers.HandlerFunc(func(context.Context, pgx.Tx, *envelope.Envelope) (json.RawMessage, error) {
				calls.Add(1)
				return nil, &hookedError{err: tc.fail, hook: func() {
					// Rescued, and fetched by another worker as attempt 2.
					_, hookErr = b.pool.Exec(ctx, `UPDATE river_job SET attempt = 2, attempted_at = now() WHERE id = $1 AND state = 'running'`, jobID)
				}}
			}))
			id := b.insert(t, "github", "gh-fenced-"+tc.name, "push", webhooktest.GitHubPush("refs/heads/main"), 0)
			require.NoError(t, b.pool.QueryRow(ctx, `SELECT id FROM river_job WHERE (args->>'envelope_id')::bigint = $1`, id).Scan(&jobID))
			a := b.startClient(t)
			require.NoError(t, waitFor(20*time.Second, func() (bool, error) { return calls.Load() >= 1, nil }))
			stopClient(t, a)
			require.NoError(t, hookErr)
			s := b.state(t, id)
			require.Equal(t, "pending", s.Status, "a stale attempt's report changed an envelope another attempt owns")
			require.Zero(t, s.Attempts)
			require.Nil(t, s.LastError)
			require.Empty(t, s.Outcomes)
		})
	}
}
