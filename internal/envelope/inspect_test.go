package envelope_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/inboxhq/inbox/internal/envelope"
	"github.com/inboxhq/inbox/internal/envelope/envelopetest"
)

// retryAt records a retried attempt of envelope id with cause, finished at
// the given time.
func (b *bundle) retryAt(t *testing.T, id int64, cause string, at time.Time) {
	t.Helper()
	ctx := context.Background()
	require.NoError(t, pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		_, started, err := envelope.Lock(ctx, tx, id)
		if err != nil {
			return err
		}
		ok, err := envelope.RecordAttempt(ctx, tx, id, envelope.Attempt{Attempt: 1, Outcome: envelope.OutcomeRetry, Error: "e", Cause: cause, StartedAt: started, Worker: "w"})
		require.True(t, ok)
		return err
	}))
	b.exec(t, `UPDATE envelope_attempt SET started_at = $2, finished_at = $2 WHERE id = (SELECT max(id) FROM envelope_attempt WHERE envelope_id = $1)`, id, at)
}

// Failures: failed envelopes per cause now, and failing attempts per bucket
// of the window; attempts outside it count nowhere.
func TestFailuresBucketsAttemptsByCause(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	for range 2 {
		envelopetest.Insert(t, b.pool, envelopetest.Row{Source: "stripe", Status: "failed", LastError: "unknown currency", LastCause: "unknown_currency"})
	}
	latest := envelopetest.Insert(t, b.pool, envelopetest.Row{Source: "stripe", Status: "failed", LastError: "the newest", LastCause: "unknown_currency"})
	shopFailed := envelopetest.Insert(t, b.pool, envelopetest.Row{Source: "shop", Status: "failed", LastCause: "forward_5xx"})
	pending := envelopetest.Insert(t, b.pool, envelopetest.Row{Source: "stripe"})
	b.retryAt(t, pending, "timeout", t0.Add(10*time.Minute))                   // bucket 0
	b.retryAt(t, pending, "timeout", t0.Add(70*time.Minute))                   // bucket 1
	b.retryAt(t, pending, "timeout", t0.Add(119*time.Minute))                  // bucket 1
	b.retryAt(t, pending, "timeout", t0.Add(-time.Second))                     // before the window
	b.retryAt(t, pending, "timeout", t0.Add(3*time.Hour))                      // after it
	b.retryAt(t, pending, "unknown_currency", t0.Add(2*time.Hour+time.Minute)) // bucket 2
	other := envelopetest.Insert(t, b.pool, envelopetest.Row{Source: "shop"})
	b.retryAt(t, other, "forward_5xx", t0)

	w := envelope.FailureWindow{Since: t0, Bucket: time.Hour, Buckets: 3}
	got, err := envelope.Failures(ctx, b.pool, w)
	require.NoError(t, err)
	require.Equal(t, []envelope.CauseCount{
		{Cause: "unknown_currency", Failed: 3, LatestID: latest, LatestError: "the newest", Attempts: []int64{0, 0, 1}, Total: 1},
		{Cause: "forward_5xx", Failed: 1, LatestID: shopFailed, Attempts: []int64{1, 0, 0}, Total: 1},
		{Cause: "timeout", Attempts: []int64{1, 2, 0}, Total: 3},
	}, got, "failed now first, then by attempts")

	w.Source = "shop"
	got, err = envelope.Failures(ctx, b.pool, w)
	require.NoError(t, err)
	require.Equal(t, []envelope.CauseCount{{Cause: "forward_5xx", Failed: 1, LatestID: shopFailed, Attempts: []int64{1, 0, 0}, Total: 1}}, got)

	_, err = envelope.Failures(ctx, b.pool, envelope.FailureWindow{Since: t0, Bucket: 0, Buckets: 3})
	require.Error(t, err)
}

// The console's lookups: a conflict's body only under its own envelope,
// duplicates newest first, a job's envelope, replay runs by batch.
func TestInspectLookups(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	a := envelopetest.Insert(t, b.pool, envelopetest.Row{Status: "failed"})
	other := envelopetest.Insert(t, b.pool, envelopetest.Row{})
	var conflict int64
	require.NoError(t, b.pool.QueryRow(ctx, `
		INSERT INTO envelope_conflict (envelope_id, source, delivery_id, body_sha256, body_size, body)
		SELECT id, source, delivery_id, body_sha256, 3, 'new' FROM envelope WHERE id = $1 RETURNING id`, a).Scan(&conflict))
	body, err := envelope.ConflictBody(ctx, b.pool, a, conflict)
	require.NoError(t, err)
	require.Equal(t, "new", string(body))
	_, err = envelope.ConflictBody(ctx, b.pool, other, conflict)
	require.ErrorIs(t, err, envelope.ErrNotFound, "another envelope's conflict")

	t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	for i := range 3 {
		envelopetest.InsertDuplicate(t, b.pool, a, t0.Add(time.Duration(i)*time.Minute))
	}
	times, err := envelope.DuplicateTimes(ctx, b.pool, a, 2)
	require.NoError(t, err)
	require.Len(t, times, 2)
	require.True(t, times[0].Equal(t0.Add(2*time.Minute)) && times[1].Equal(t0.Add(time.Minute)), "the newest 2, newest first: %v", times)

	var job int64
	require.NoError(t, b.pool.QueryRow(ctx, `
		INSERT INTO river_job (kind, args, max_attempts, queue, state) VALUES ($1, jsonb_build_object('envelope_id', $2::bigint), 25, 'default', 'available')
		RETURNING id`, envelope.ProcessArgs{}.Kind(), a).Scan(&job))
	got, err := envelope.OfJob(ctx, b.pool, job)
	require.NoError(t, err)
	require.Equal(t, a, got)
	_, err = envelope.OfJob(ctx, b.pool, job+1000)
	require.ErrorIs(t, err, envelope.ErrNotFound)

	const first = "00000000-0000-0000-0000-000000000001"
	envelopetest.InsertReplay(t, b.pool, envelopetest.Replay{EnvelopeID: a, Actor: "alice", Reason: "first", BatchID: first, PriorStatus: "failed", ReplayedAt: t0})
	envelopetest.InsertReplay(t, b.pool, envelopetest.Replay{EnvelopeID: other, Actor: "alice", Reason: "first", BatchID: first, PriorStatus: "done", ReplayedAt: t0})
	envelopetest.InsertReplay(t, b.pool, envelopetest.Replay{EnvelopeID: a, Actor: "bob", Reason: "second", PriorStatus: "failed", ReplayedAt: t0.Add(time.Hour)})
	runs, err := envelope.RecentReplayRuns(ctx, b.pool, 10)
	require.NoError(t, err)
	require.Len(t, runs, 2)
	require.Equal(t, "bob", runs[0].Actor, "newest first")
	require.Equal(t, "", runs[0].BatchID)
	require.Equal(t, int64(1), runs[0].Envelopes)
	require.Equal(t, "first", runs[1].Reason)
	require.Equal(t, int64(2), runs[1].Envelopes)
	require.Equal(t, a, runs[1].FirstEnvelopeID)

	outcome, err := envelope.ReplayOutcome(ctx, b.pool, "00000000-0000-0000-0000-000000000001")
	require.NoError(t, err)
	require.Equal(t, []envelope.StatusCount{{Status: "failed", N: 1}, {Status: "pending", N: 1}}, outcome)
}

// A run larger than the window RecentReplayRuns looks in is counted whole.
func TestRecentReplayRunsCountsALargeRunWhole(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	a := envelopetest.Insert(t, b.pool, envelopetest.Row{Status: "failed"})
	b.exec(t, `INSERT INTO envelope_replay (envelope_id, actor, reason, batch_id, prior_status, replayed_at)
		SELECT $1, 'alice', 'big', '00000000-0000-0000-0000-00000000000b', 'failed', now() - interval '1 hour' + g * interval '1 ms'
		  FROM generate_series(1, 10050) AS g`, a)
	envelopetest.InsertReplay(t, b.pool, envelopetest.Replay{EnvelopeID: a, Actor: "bob", Reason: "small",
		BatchID: "00000000-0000-0000-0000-00000000000c", PriorStatus: "failed"})
	runs, err := envelope.RecentReplayRuns(ctx, b.pool, 10)
	require.NoError(t, err)
	require.Len(t, runs, 2)
	require.Equal(t, "small", runs[0].Reason)
	require.Equal(t, "big", runs[1].Reason)
	require.Equal(t, int64(10050), runs[1].Envelopes, "every row of the run, beyond the window")
}
