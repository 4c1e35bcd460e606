package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/inboxhq/inbox/internal/envelope"
	"github.com/inboxhq/inbox/internal/handlers"
	"github.com/inboxhq/inbox/internal/pgtest"
	"github.com/inboxhq/inbox/internal/webhooktest"
	"github.com/inboxhq/inbox/internal/worker"
)

// jobOf returns the id of envelope id's job.
func (b *bundle) jobOf(t *testing.T, id int64) int64 {
	t.Helper()
	var jobID int64
	require.NoError(t, b.pool.QueryRow(context.Background(), `SELECT id FROM river_job WHERE (args->>'envelope_id')::bigint = $1`, id).Scan(&jobID))
	return jobID
}

// staleWork runs one attempt of the envelope's job (jobID) as the given attempt
// number, in a worker process of its own, as a worker that was paused past
// the rescue horizon would when it resumes.
func (b *bundle) staleWork(t *testing.T, id, jobID int64, attempt int) error {
	t.Helper()
	ctx := context.Background()
	w := &worker.ProcessWorker{Pool: b.worker, Registry: b.registry, Policy: worker.DefaultPolicy,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Name: "stale"}
	return w.Work(ctx, &river.Job[envelope.ProcessArgs]{
		JobRow: &rivertype.JobRow{ID: jobID, Attempt: attempt, MaxAttempts: 25, State: rivertype.JobStateRunning},
		Args:   envelope.ProcessArgs{EnvelopeID: id, Source: "src"},
	})
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

// A stale attempt's failure must not overwrite a later attempt's result.
// Attempt 2 processed the envelope to done; then attempt 1, paused past the
// rescue horizon, resumes and its handler would fail. Its batch locks the
// envelope and the job and finds both settled: the fence (the job is no
// longer running at attempt 1), the envelope's status (final: no handler
// runs) and FinishMany's compare-and-set on pending each keep it from
// writing anything, and in the batched worker the failure would be recorded
// in the same transaction that holds those locks, so no window remains
// between deciding an attempt's outcome and recording it.
func TestStaleAttemptsFailureDoesNotOverwriteDone(t *testing.T) {
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
			id := b.insert(t, "standard", "msg_stale_"+tc.name, "payment.succeeded", webhooktest.StandardPayment("pay_stale", "m_stale", 500, "USD"), 0)
			// Attempt 2, the rescued one, runs first and finishes.
			job := b.jobOf(t, id)
			_, err := b.pool.Exec(ctx, `UPDATE river_job SET state = 'running', attempt = 2, attempted_at = now() WHERE (args->>'envelope_id')::bigint = $1`, id)
			require.NoError(t, err)
			require.NoError(t, b.staleWork(t, id, job, 2))
			// Attempt 1 comes back, with a handler that fails.
			var calls atomic.Int32
			b.registry.Register("standard", "payment.succeeded", handlers.HandlerFunc(func(context.Context, handlers.Run) (json.RawMessage, error) {
				calls.Add(1)
				return nil, tc.fail
			}))
			err = b.staleWork(t, id, job, 1)
			require.ErrorContains(t, err, "lost the job")
			require.Zero(t, calls.Load(), "a stale attempt ran the handler of a settled envelope")
			s := b.state(t, id)
			require.Equal(t, "done", s.Status, "a stale attempt's failure overwrote done")
			require.Nil(t, s.LastError, "a stale attempt's error was recorded on a done envelope")
			require.Equal(t, 1, s.Attempts)
			require.Equal(t, []string{"done"}, s.Outcomes)
			require.Equal(t, 1, pgtest.Count(t, b.pool, `SELECT count(*) FROM ledger_transaction WHERE envelope_id = $1`, id))
			require.Zero(t, pgtest.Count(t, b.pool, `SELECT count(*) FROM river_job WHERE id = $1`, job), "attempt 2 deleted the job of the envelope it finished")
		})
	}
}

// The fence alone: the job was rescued and is running as attempt 2 on
// another worker, which has not finished yet (the envelope is still
// pending, so the envelope's compare-and-set cannot help). Attempt 1, whose
// handler fails, must change nothing: it no longer owns the job.
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
			b.registry.Register("github", "*", handlers.HandlerFunc(func(context.Context, handlers.Run) (json.RawMessage, error) {
				return nil, tc.fail
			}))
			id := b.insert(t, "github", "gh-fenced-"+tc.name, "push", webhooktest.GitHubPush("refs/heads/main"), 0)
			_, err := b.pool.Exec(ctx, `UPDATE river_job SET state = 'running', attempt = 2, attempted_at = now() WHERE (args->>'envelope_id')::bigint = $1`, id)
			require.NoError(t, err)
			err = b.staleWork(t, id, b.jobOf(t, id), 1)
			require.ErrorContains(t, err, "lost the job")
			s := b.state(t, id)
			require.Equal(t, "pending", s.Status, "a stale attempt's report changed an envelope another attempt owns")
			require.Zero(t, s.Attempts)
			require.Nil(t, s.LastError)
			require.Empty(t, s.Outcomes)
		})
	}
}
