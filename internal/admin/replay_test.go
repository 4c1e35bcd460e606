package admin

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/inboxhq/inbox/internal/envelope"
	"github.com/inboxhq/inbox/internal/pgtest"
)

// snapshot fingerprints every row a replay could touch.
func (b *bundle) snapshot(t testing.TB) [4]string {
	t.Helper()
	var s [4]string
	require.NoError(t, b.pool.QueryRow(context.Background(), `
		SELECT (SELECT coalesce(md5(string_agg(e::text, ',' ORDER BY id)), '') FROM envelope e),
		       (SELECT coalesce(md5(string_agg(j.id || ':' || j.state || ':' || j.args::text, ',' ORDER BY id)), '') FROM river_job j),
		       (SELECT count(*)::text FROM envelope_replay),
		       (SELECT count(*)::text FROM envelope_attempt)`).Scan(&s[0], &s[1], &s[2], &s[3]))
	return s
}

func TestDryRunChangesNothing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	failed := seedFailed(t, b.pool, "gh", 25)
	queued := b.insert(t, "github", "q1", "push", []byte(`{"ref":"x"}`)) // pending with a waiting job
	before := b.snapshot(t)

	res, err := DryRun(ctx, b.pool, Filter{Source: "gh", Status: envelope.StatusFailed}, 0)
	require.NoError(t, err)
	require.Equal(t, 25, res.Matched)
	require.Equal(t, 0, res.AlreadyQueued)
	require.Equal(t, 25, res.WouldReplay)
	require.Len(t, res.Sample, SampleSize)
	for i, s := range res.Sample {
		require.Equal(t, failed[i], s.ID, "sample in id order")
		require.Equal(t, envelope.StatusFailed, s.Status)
	}

	res, err = DryRun(ctx, b.pool, Filter{IDs: []int64{queued, failed[0], failed[0]}}, 0)
	require.NoError(t, err)
	require.Equal(t, DryRunResult{Matched: 2, AlreadyQueued: 1, WouldReplay: 1}, DryRunResult{Matched: res.Matched, AlreadyQueued: res.AlreadyQueued, WouldReplay: res.WouldReplay})
	require.Len(t, res.Sample, 2)

	res, err = DryRun(ctx, b.pool, Filter{Source: "gh"}, 7)
	require.NoError(t, err)
	require.Equal(t, 25, res.Matched)
	require.Equal(t, 7, res.WouldReplay)

	_, err = DryRun(ctx, b.pool, Filter{IDs: []int64{failed[0], 999999}}, 0)
	require.ErrorIs(t, err, envelope.ErrNotFound)
	require.EqualError(t, err, "envelope 999999 not found")

	require.Equal(t, before, b.snapshot(t), "a dry run changed the database")
}

// A dry run of exactly MaxIDs matches still names them (ReplayIDs), so
// that the confirmed replay, pinned to them with Within, takes exactly
// those: not one stored since that matches too.
func TestDryRunOfExactlyMaxIDsNamesThemAndTheReplayTakesThose(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	ids := seedFailed(t, b.pool, "gh", MaxIDs)
	f := Filter{Source: "gh", Status: envelope.StatusFailed}
	res, err := DryRun(ctx, b.pool, f, 0)
	require.NoError(t, err)
	require.Equal(t, MaxIDs, res.Matched)
	require.Equal(t, ids, res.ReplayIDs, "exactly the limit: every id named, in the replay's order")

	later := seedFailed(t, b.pool, "gh", 1)[0]
	f.Within = res.ReplayIDs
	got, err := Replay(ctx, b.pool, b.jobs, req(f))
	require.NoError(t, err)
	require.Equal(t, MaxIDs, got.Replayed)
	require.Equal(t, MaxIDs, pgtest.Count(t, b.pool, `SELECT count(*) FROM envelope_replay WHERE envelope_id = ANY($1)`, ids))
	require.Equal(t, "failed", b.status(t, later), "stored after the dry run: not replayed")
}

func TestReplayByIDs(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	ids := seedFailed(t, b.pool, "gh", 3)

	r := req(Filter{IDs: []int64{ids[2], ids[0], ids[2]}})
	r.Actor, r.Reason = "alice", "INC-42: handler bug fixed"
	res, err := Replay(ctx, b.pool, b.jobs, r)
	require.NoError(t, err)
	require.Equal(t, 2, res.Matched)
	require.Equal(t, 2, res.Replayed)
	require.Equal(t, 0, res.Skipped)
	require.Equal(t, 1, res.Batches)
	require.False(t, res.Interrupted)
	require.NotEmpty(t, res.BatchID)

	for _, id := range []int64{ids[0], ids[2]} {
		var status string
		var processedAt *time.Time
		var lastError *string
		require.NoError(t, b.pool.QueryRow(ctx, `SELECT status, processed_at, last_error FROM envelope WHERE id = $1`, id).Scan(&status, &processedAt, &lastError))
		require.Equal(t, "pending", status)
		require.Nil(t, processedAt)
		require.NotNil(t, lastError, "last_error stays until reprocessed")

		var actor, reason, batchID, prior string
		var filter map[string]any
		var jobID int64
		require.NoError(t, b.pool.QueryRow(ctx, `
			SELECT actor, reason, filter, batch_id::text, prior_status, job_id FROM envelope_replay WHERE envelope_id = $1`, id).
			Scan(&actor, &reason, &filter, &batchID, &prior, &jobID))
		require.Equal(t, "alice", actor)
		require.Equal(t, "INC-42: handler bug fixed", reason)
		require.Equal(t, map[string]any{"ids": []any{float64(ids[0]), float64(ids[2])}}, filter)
		require.Equal(t, res.BatchID, batchID)
		require.Equal(t, "failed", prior)
		require.Equal(t, 1, pgtest.Count(t, b.pool, `SELECT count(*) FROM river_job WHERE id = $1 AND state = 'available' AND (args->>'envelope_id')::bigint = $2`, jobID, id))
	}
	require.Equal(t, "failed", b.status(t, ids[1]))
	require.Equal(t, map[int64]int{ids[0]: 1, ids[2]: 1}, b.jobsPerEnvelope(t))

	// An unknown id changes nothing, known ones included.
	before := b.snapshot(t)
	_, err = Replay(ctx, b.pool, b.jobs, req(Filter{IDs: []int64{ids[1], 424242, 434343}}))
	var nf *NotFoundError
	require.ErrorAs(t, err, &nf)
	require.ErrorIs(t, err, envelope.ErrNotFound)
	require.EqualError(t, err, "envelopes 424242, 434343 not found")
	require.Equal(t, before, b.snapshot(t))
}

func TestReplayValidate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		r    ReplayRequest
		err  string
	}{
		{"no reason", ReplayRequest{Filter: Filter{IDs: []int64{1}}, Actor: "a"}, "reason is required"},
		{"blank reason", ReplayRequest{Filter: Filter{IDs: []int64{1}}, Actor: "a", Reason: "  "}, "reason is required"},
		{"no actor", ReplayRequest{Filter: Filter{IDs: []int64{1}}, Reason: "r"}, "actor is required"},
		{"everything", ReplayRequest{Actor: "a", Reason: "r"}, "at least one filter"},
		{"bad filter", ReplayRequest{Filter: Filter{Status: "nope"}, Actor: "a", Reason: "r"}, "status"},
		{"batch too big", ReplayRequest{Filter: Filter{Source: "s"}, Actor: "a", Reason: "r", BatchSize: MaxBatchSize + 1}, "batch size"},
		{"negative limit", ReplayRequest{Filter: Filter{Source: "s"}, Actor: "a", Reason: "r", Limit: -1}, "limit"},
	} {
		require.ErrorContains(t, tc.r.Validate(), tc.err, tc.name)
		// Replay refuses before touching the database (a nil pool would panic).
		_, err := Replay(context.Background(), nil, nil, tc.r)
		require.ErrorContains(t, err, tc.err, tc.name)
	}
}

func TestReplayByFilterInBatches(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	target := seedFailed(t, b.pool, "gh", 25)
	other := seedFailed(t, b.pool, "other", 5)
	_, err := b.pool.Exec(ctx, `UPDATE envelope SET status = 'done' WHERE id = $1`, target[24]) // no longer matches
	require.NoError(t, err)

	var progress []Progress
	r := req(Filter{Source: "gh", Status: envelope.StatusFailed, Since: Bound{Ago: time.Hour}})
	r.BatchSize = 10
	r.ProgressFunc = func(p Progress) { progress = append(progress, p) }
	res, err := Replay(ctx, b.pool, b.jobs, r)
	require.NoError(t, err)
	require.Equal(t, 24, res.Matched)
	require.Equal(t, 24, res.Replayed)
	require.Equal(t, 3, res.Batches)
	require.Len(t, progress, 4, "once counted, then after each batch")
	for i, p := range progress {
		require.Equal(t, i, p.Batches)
		require.Equal(t, 24, p.Total)
		require.Equal(t, res.BatchID, p.BatchID)
	}
	require.Equal(t, []int{0, 10, 20, 24}, []int{progress[0].Replayed, progress[1].Replayed, progress[2].Replayed, progress[3].Replayed})

	require.Equal(t, 24, pgtest.Count(t, b.pool, `SELECT count(*) FROM envelope WHERE source = 'gh' AND status = 'pending'`))
	require.Equal(t, "done", b.status(t, target[24]))
	require.Equal(t, 5, pgtest.Count(t, b.pool, `SELECT count(*) FROM envelope WHERE source = 'other' AND status = 'failed'`))
	require.Equal(t, 24, pgtest.Count(t, b.pool, `SELECT count(DISTINCT envelope_id) FROM envelope_replay WHERE batch_id = $1::uuid`, res.BatchID))
	for _, id := range other {
		require.Zero(t, b.jobsPerEnvelope(t)[id])
	}
	var filter map[string]any
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT filter FROM envelope_replay LIMIT 1`).Scan(&filter))
	require.Equal(t, "gh", filter["source"])
	require.Equal(t, "failed", filter["status"])
	require.Equal(t, "1h0m0s", filter["since_ago"])
	require.NotEmpty(t, filter["since"])

	// Safe to run twice: the replayed envelopes are pending now and no
	// longer match; by source they match but all have live jobs.
	res, err = Replay(ctx, b.pool, b.jobs, req(Filter{Source: "gh", Status: envelope.StatusFailed}))
	require.NoError(t, err)
	require.Zero(t, res.Replayed)
	res, err = Replay(ctx, b.pool, b.jobs, req(Filter{Source: "gh"}))
	require.NoError(t, err)
	require.Equal(t, 25, res.Matched)
	require.Equal(t, 1, res.Replayed) // the done one
	require.Equal(t, 24, res.Skipped)
	for id, n := range b.jobsPerEnvelope(t) {
		require.Equal(t, 1, n, "envelope %d", id)
	}
}

func TestReplayLimit(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ids := seedFailed(t, b.pool, "gh", 30)
	r := req(Filter{Source: "gh"})
	r.BatchSize, r.Limit = 5, 12
	res, err := Replay(context.Background(), b.pool, b.jobs, r)
	require.NoError(t, err)
	require.Equal(t, 30, res.Matched)
	require.Equal(t, 12, res.Replayed)
	require.True(t, res.LimitReached)
	require.Equal(t, 3, res.Batches)
	require.Equal(t, 12, pgtest.Count(t, b.pool, `SELECT count(*) FROM envelope WHERE status = 'pending'`))
	require.Equal(t, "pending", b.status(t, ids[11]), "the first ids, in order")
	require.Equal(t, "failed", b.status(t, ids[12]))

	// A limit that leaves nothing out is not reached.
	r = req(Filter{IDs: ids[20:25]})
	r.Limit = 5
	res, err = Replay(context.Background(), b.pool, b.jobs, r)
	require.NoError(t, err)
	require.Equal(t, 5, res.Replayed)
	require.False(t, res.LimitReached)
}

func TestReplaySkipsEnvelopeWithLiveJob(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	queued := b.insert(t, "github", "q1", "push", []byte(`{"ref":"x"}`)) // its job waits: no worker runs
	failed := seedFailed(t, b.pool, "gh", 1)[0]
	_, err := b.pool.Exec(ctx, `UPDATE river_job SET state = 'scheduled', scheduled_at = now() + interval '1 hour'`)
	require.NoError(t, err)

	// The SQL check skips it before River's unique opts would: the inserter
	// is never asked for it.
	rec := &recordingInserter{JobInserter: b.jobs}
	res, err := Replay(ctx, b.pool, rec, req(Filter{IDs: []int64{queued, failed}}))
	require.NoError(t, err)
	require.Equal(t, []int64{failed}, rec.asked)
	require.Equal(t, 2, res.Matched)
	require.Equal(t, 1, res.Replayed)
	require.Equal(t, 1, res.Skipped)
	require.Equal(t, []int64{queued}, res.SkippedIDs)
	require.Zero(t, pgtest.Count(t, b.pool, `SELECT count(*) FROM envelope_replay WHERE envelope_id = $1`, queued))

	// Every live state counts; a finished job does not.
	for _, state := range []string{"available", "retryable", "running", "pending"} {
		_, err := b.pool.Exec(ctx, `UPDATE river_job SET state = $1::river_job_state WHERE (args->>'envelope_id')::bigint = $2`, state, queued)
		require.NoError(t, err)
		rec.asked = nil
		res, err = Replay(ctx, b.pool, rec, req(Filter{IDs: []int64{queued, failed}}))
		require.NoError(t, err, state)
		require.Equal(t, 0, res.Replayed, state)
		require.Equal(t, 2, res.Skipped, state)
		require.Empty(t, rec.asked, state)
	}
	require.Equal(t, map[int64]int{queued: 1, failed: 1}, b.jobsPerEnvelope(t))

	_, err = b.pool.Exec(ctx, `UPDATE river_job SET state = 'completed', finalized_at = now() WHERE (args->>'envelope_id')::bigint = $1`, queued)
	require.NoError(t, err)
	res, err = Replay(ctx, b.pool, b.jobs, req(Filter{IDs: []int64{queued}}))
	require.NoError(t, err)
	require.Equal(t, 1, res.Replayed)
	require.Equal(t, map[int64]int{queued: 2, failed: 1}, b.jobsPerEnvelope(t))
}

// TestConcurrentReplaysSerialize: two replays of the same envelopes at once
// replay each exactly once between them.
func TestConcurrentReplaysSerialize(t *testing.T) {
	t.Parallel()
	b := setup(t)
	seedFailed(t, b.pool, "gh", 200)
	var wg sync.WaitGroup
	results := make([]ReplayResult, 4)
	errs := make([]error, 4)
	for i := range results {
		wg.Go(func() {
			r := req(Filter{Source: "gh"})
			r.BatchSize = 30
			results[i], errs[i] = Replay(context.Background(), b.pool, b.jobs, r)
		})
	}
	wg.Wait()
	replayed := 0
	for i := range results {
		require.NoError(t, errs[i])
		replayed += results[i].Replayed
		require.Equal(t, 200, results[i].Replayed+results[i].Skipped)
	}
	require.Equal(t, 200, replayed)
	require.Equal(t, 200, pgtest.Count(t, b.pool, `SELECT count(*) FROM envelope_replay`))
	jobs := b.jobsPerEnvelope(t)
	require.Len(t, jobs, 200)
	for id, n := range jobs {
		require.Equal(t, 1, n, "envelope %d", id)
	}
}

func TestReplayDonePaymentPostsOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	b.runWorker(t)
	id := b.insert(t, "standard", "msg_1", "payment.succeeded", standardPayment("pay_1"))
	b.waitStatusIs(t, 20*time.Second, "first processing", id, "done")
	require.Equal(t, 1, pgtest.Count(t, b.pool, `SELECT count(*) FROM ledger_transaction`))

	res, err := Replay(ctx, b.pool, b.jobs, req(Filter{IDs: []int64{id}}))
	require.NoError(t, err)
	require.Equal(t, 1, res.Replayed)
	var replayJob int64
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT job_id FROM envelope_replay WHERE envelope_id = $1 AND prior_status = 'done'`, id).Scan(&replayJob))

	pgtest.Eventually(t, 20*time.Second, "the replay's job to be done and deleted", func() (bool, string) {
		var state string
		require.NoError(t, b.pool.QueryRow(ctx, `SELECT coalesce((SELECT state::text FROM river_job WHERE id = $1), 'gone')`, replayJob).Scan(&state))
		return state == "gone", fmt.Sprintf("job %d is %s", replayJob, state)
	})
	require.Equal(t, "done", b.status(t, id))
	require.Equal(t, 2, pgtest.Count(t, b.pool, `SELECT count(*) FROM envelope_attempt WHERE envelope_id = $1 AND outcome = 'done'`, id))
	require.Equal(t, 1, pgtest.Count(t, b.pool, `SELECT count(*) FROM envelope_attempt WHERE envelope_id = $1 AND job_id = $2`, id, replayJob))
	require.Equal(t, 1, pgtest.Count(t, b.pool, `SELECT count(*) FROM ledger_transaction`), "a replay must not post twice")
	require.Equal(t, 2, pgtest.Count(t, b.pool, `SELECT count(*) FROM ledger_entry`))
	var result map[string]any
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT result FROM envelope WHERE id = $1`, id).Scan(&result))
	require.Equal(t, false, result["posted"])
	require.Equal(t, "envelope already posted", result["reason"])
}

func TestReplayFailedProcessesIt(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	// A payment that failed (attempts exhausted) and whose job is finished.
	id := b.insert(t, "standard", "msg_f", "payment.succeeded", standardPayment("pay_f"))
	_, err := b.pool.Exec(ctx, `
		WITH e AS (UPDATE envelope SET status = 'failed', processed_at = now(), attempts = 1, last_error = 'attempts exhausted: downstream down' WHERE id = $1)
		UPDATE river_job SET state = 'discarded', finalized_at = now()`, id)
	require.NoError(t, err)

	res, err := Replay(ctx, b.pool, b.jobs, req(Filter{Status: envelope.StatusFailed}))
	require.NoError(t, err)
	require.Equal(t, 1, res.Replayed)
	b.runWorker(t)
	pgtest.Eventually(t, 20*time.Second, "processing", func() (bool, string) {
		s := b.status(t, id)
		return s != "pending", fmt.Sprintf("envelope %d is %s", id, s)
	})
	require.Equal(t, "done", b.status(t, id))
	require.Equal(t, 1, pgtest.Count(t, b.pool, `SELECT count(*) FROM ledger_transaction WHERE envelope_id = $1`, id))
	require.Equal(t, 1, pgtest.Count(t, b.pool, `SELECT count(*) FROM envelope_attempt WHERE envelope_id = $1 AND outcome = 'done'`, id))
}

// TestBulkReplayProcessesEachOnce replays 3000 failed envelopes in batches,
// then the real worker processes each exactly once.
func TestBulkReplayProcessesEachOnce(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("bulk test")
	}
	b := setup(t)
	const n = 3000
	seedFailed(t, b.pool, "gh", n)
	r := req(Filter{Source: "gh", Status: envelope.StatusFailed})
	res, err := Replay(context.Background(), b.pool, b.jobs, r)
	require.NoError(t, err)
	require.Equal(t, n, res.Replayed)
	require.Equal(t, n/DefaultBatchSize, res.Batches)

	b.runWorker(t)
	pgtest.Eventually(t, 3*time.Minute, "3000 envelopes done", func() (bool, string) {
		done, live := pgtest.Count(t, b.pool, `SELECT count(*) FROM envelope WHERE status = 'done'`), pgtest.Count(t, b.pool, `SELECT count(*) FROM river_job WHERE kind = 'process_envelope'`)
		return done == n && live == 0, fmt.Sprintf("%d envelopes done, %d processing jobs left (the worker deletes a done envelope's), want %d and 0", done, live, n)
	})
	// The jobs are gone; their ids stay on the attempts.
	require.Equal(t, n, pgtest.Count(t, b.pool, `SELECT count(DISTINCT job_id) FROM envelope_attempt`), "one job per envelope")
	require.Zero(t, pgtest.Count(t, b.pool, `
		SELECT count(*) FROM envelope e
		 WHERE (SELECT count(*) FROM envelope_attempt a WHERE a.envelope_id = e.id AND a.outcome = 'done') <> 1`), "one done attempt per envelope")
	require.Equal(t, n, pgtest.Count(t, b.pool, `SELECT count(*) FROM envelope_attempt`))
}

// partition checks that every envelope is either fully replayed (pending, one
// replay row, one job) or untouched (failed, no replay row, no job), and
// returns how many were replayed.
func (b *bundle) partition(t *testing.T, ids []int64) int {
	t.Helper()
	rows, err := b.pool.Query(context.Background(), `
		SELECT e.id, e.status, e.processed_at IS NULL,
		       (SELECT count(*) FROM envelope_replay r WHERE r.envelope_id = e.id),
		       (SELECT count(*) FROM river_job j WHERE (j.args->>'envelope_id')::bigint = e.id)
		  FROM envelope e WHERE e.id = ANY($1) ORDER BY e.id`, ids)
	require.NoError(t, err)
	replayed, seen := 0, 0
	var id int64
	var status string
	var unprocessed bool
	var replays, jobs int
	_, err = pgx.ForEachRow(rows, []any{&id, &status, &unprocessed, &replays, &jobs}, func() error {
		seen++
		switch {
		case status == "pending" && unprocessed && replays == 1 && jobs == 1:
			replayed++
		case status == "failed" && !unprocessed && replays == 0 && jobs == 0:
		default:
			t.Errorf("envelope %d half replayed: status %s, replays %d, jobs %d", id, status, replays, jobs)
		}
		return nil
	})
	require.NoError(t, err)
	require.Equal(t, len(ids), seen)
	return replayed
}

func TestReplayInterruptedAfterBatch(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ids := seedFailed(t, b.pool, "gh", 50)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r := req(Filter{Source: "gh"})
	r.BatchSize = 10
	r.ProgressFunc = func(p Progress) {
		if p.Batches == 1 {
			cancel() // as SIGINT would, once the first batch committed
		}
	}
	res, err := Replay(ctx, b.pool, b.jobs, r)
	require.ErrorIs(t, err, ErrInterrupted)
	require.ErrorIs(t, err, context.Canceled)
	require.True(t, res.Interrupted)
	require.Equal(t, 10, res.Replayed)
	require.Equal(t, 1, res.Batches)
	require.Equal(t, 10, b.partition(t, ids))
	require.Equal(t, "pending", b.status(t, ids[9]))
	require.Equal(t, "failed", b.status(t, ids[10]))
}

func TestReplayInterruptedMidBatchRollsBack(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ids := seedFailed(t, b.pool, "gh", 50)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r := req(Filter{Source: "gh"})
	r.BatchSize = 10
	r.beforeCommit = func(batch int) {
		if batch == 3 {
			cancel() // the batch's rows are written but not committed
		}
	}
	res, err := Replay(ctx, b.pool, b.jobs, r)
	require.ErrorIs(t, err, ErrInterrupted)
	require.True(t, res.Interrupted)
	require.Equal(t, 20, res.Replayed)
	require.Equal(t, 2, res.Batches)
	require.Equal(t, 20, b.partition(t, ids))
}

// recordingInserter records which envelopes it was asked to enqueue.
type recordingInserter struct {
	JobInserter
	asked []int64
}

func (r *recordingInserter) InsertManyTx(ctx context.Context, tx pgx.Tx, params []river.InsertManyParams) ([]*rivertype.JobInsertResult, error) {
	for _, p := range params {
		r.asked = append(r.asked, p.Args.(envelope.ProcessArgs).EnvelopeID)
	}
	return r.JobInserter.InsertManyTx(ctx, tx, params)
}

// failingInserter fails on its nth call: a batch that fails after locking
// rolls back whole.
type failingInserter struct {
	JobInserter
	n, calls int
}

func (f *failingInserter) InsertManyTx(ctx context.Context, tx pgx.Tx, params []river.InsertManyParams) ([]*rivertype.JobInsertResult, error) {
	f.calls++
	if f.calls == f.n {
		return nil, errors.New("boom")
	}
	return f.JobInserter.InsertManyTx(ctx, tx, params)
}

func TestReplayErrorKeepsCommittedBatches(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ids := seedFailed(t, b.pool, "gh", 30)
	r := req(Filter{Source: "gh"})
	r.BatchSize = 10
	res, err := Replay(context.Background(), b.pool, &failingInserter{JobInserter: b.jobs, n: 2}, r)
	require.ErrorContains(t, err, "replay batch 2 (after 10 replayed): insert jobs: boom")
	require.False(t, res.Interrupted)
	require.Equal(t, 10, res.Replayed)
	require.Equal(t, 10, b.partition(t, ids))
}

// An envelope whose body retention dropped has nothing to process: by id it
// is refused, by filter it does not match, and nothing changes.
func TestReplayRefusesPurgedEnvelopes(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	ids := seedFailed(t, b.pool, "src", 2)
	// Only done/ignored bodies are purged; make the first one a purged done.
	_, err := b.pool.Exec(ctx, `WITH d AS (DELETE FROM envelope_body WHERE id = $1)
		UPDATE envelope SET status = 'done', body = NULL, payload = NULL, body_purged_at = now() WHERE id = $1`, ids[0])
	require.NoError(t, err)
	before := b.snapshot(t)

	_, err = Replay(ctx, b.pool, b.jobs, req(Filter{IDs: []int64{ids[0]}}))
	var purged *PurgedError
	require.ErrorAs(t, err, &purged)
	require.Equal(t, []int64{ids[0]}, purged.IDs)
	require.Equal(t, before, b.snapshot(t))

	dry, err := DryRun(ctx, b.pool, Filter{Source: "src"}, 0)
	require.NoError(t, err)
	require.Equal(t, 1, dry.Matched, "a purged envelope does not match")

	res, err := Replay(ctx, b.pool, b.jobs, req(Filter{Source: "src"}))
	require.NoError(t, err)
	require.Equal(t, 1, res.Replayed)
	require.Equal(t, "done", b.status(t, ids[0]))
	require.Equal(t, "pending", b.status(t, ids[1]))
	require.Equal(t, 1, pgtest.Count(t, b.pool, `SELECT count(*) FROM river_job WHERE args->>'source' = 'src'`), "the replayed job carries its source")
}
