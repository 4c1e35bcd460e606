package e2e

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/inboxhq/inbox/internal/pgtest"
)

// TestDrillZombieWorker: a worker frozen (SIGSTOP) in the middle of an
// envelope's transaction, past the rescue horizon, and resumed (SIGCONT)
// after the job was rescued and finished by another worker, must not post a
// second time.
//
// Freezing it mid-transaction deterministically, with no hook in the
// product: the test locks one payment envelope's row (X) in a transaction of
// its own before worker A starts. A fetches X's job (River marks it running,
// attempt 1), begins its transaction and blocks in envelope.Lock's
// SELECT ... FOR UPDATE. The test sees that wait in pg_stat_activity
// (pg_blocking_pids names the test's session) and SIGSTOPs A, well inside
// A's 2 s job timeout, then checks that A's session is still waiting, and
// releases its lock: A's session takes X's row lock and A is now frozen
// holding it, idle in transaction.
//
// Then worker B starts. B becomes River's leader once frozen A's lease runs
// out, rescues X's job past --rescue-after, and completes it (attempt 2 or
// later) once the server has ended A's session (idle_in_transaction_session_
// timeout = job timeout + 10 s, set by the worker's pool): B's attempts wait
// for X's row lock until then. Only then is A resumed: its attempt must roll
// back. Checked: X has one ledger transaction and one finishing attempt (B's,
// attempt >= 2), none recorded by A; A then processes a second batch alone
// (B stopped), so the zombie came back healthy.
//
// What stops this zombie is the envelope row lock and the idle-in-transaction
// timeout, not the attempt fence in worker.fence: a zombie that holds the row
// lock cannot be overtaken. TestDrillZombieFence freezes one before it takes
// the row. recovery is the time from A freezing with the lock held to X
// completed by B.
func TestDrillZombieWorker(t *testing.T) {
	t.Parallel()
	d := newDrill(t, "zombie_worker")
	n, more := scaled(t, 40, 400), scaled(t, 20, 200)
	host, err := os.Hostname()
	require.NoError(t, err)

	_, url := d.startIngest("127.0.0.1:0")
	items := drillDeliveries("zw", n+more)
	l := newLoad(d, items, func(int, int) string { return url })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	l.runRange(ctx, 0, n)
	require.EqualValues(t, n, l.acked.Load())

	envID, jobID := d.envelopeJob(items[1]) // a Standard Webhooks payment, its key in no other delivery

	lock := d.lockEnvelope(ctx, envID)
	a := d.startWorker("--max-workers", "2")
	aName := host + ":" + strconv.Itoa(a.cmd.Process.Pid)
	aPID := lock.waitBlocked(time.Minute)
	a.signal(syscall.SIGSTOP)
	require.Equal(t, aPID, lock.blocked(), "A's session stopped waiting before SIGSTOP (its 2 s job timeout passed?): rerun")
	d.requireJob(jobID, "running", 1)

	// A's session takes the lock; A is frozen holding it.
	lock.release()
	eventually(t, 30*time.Second, "A's session idle in transaction, holding X's lock", func(ctx context.Context) (bool, string) {
		var s string
		err := d.pool.QueryRow(ctx, `SELECT coalesce((SELECT state FROM pg_stat_activity WHERE pid = $1), 'gone')`, aPID).Scan(&s)
		if err != nil {
			return false, err.Error()
		}
		return s == "idle in transaction", s
	})
	frozen := time.Now()

	b := d.startWorker()
	bName := host + ":" + strconv.Itoa(b.cmd.Process.Pid)
	var sessionEnded time.Duration
	// B finishing X deletes X's job (riverjob.DeleteRunning); until then
	// the row shows River's rescue (B's attempt waits seconds for X's row
	// lock, held by frozen A, so the poll sees it).
	var sawRescue bool
	eventually(t, scaledDuration(t, 2*time.Minute, 3*time.Minute), "X's job rescued and X done by B", func(ctx context.Context) (bool, string) {
		var alive, rescued bool
		var state, status string
		var attempt int
		err := d.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE pid = $1),
			coalesce((SELECT state::text FROM river_job WHERE id = $2), 'deleted'), coalesce((SELECT attempt FROM river_job WHERE id = $2), 0),
			coalesce((SELECT EXISTS (SELECT 1 FROM unnest(errors) e WHERE e->>'error' LIKE 'Stuck job rescued%') FROM river_job WHERE id = $2), false),
			(SELECT status FROM envelope WHERE id = $3)`, aPID, jobID, envID).Scan(&alive, &state, &attempt, &rescued, &status)
		if err != nil {
			return false, err.Error()
		}
		sawRescue = sawRescue || rescued
		if !alive && sessionEnded == 0 {
			sessionEnded = time.Since(frozen)
		}
		return state == "deleted" && status == "done", fmt.Sprintf("job %s at attempt %d, envelope %s, A's session alive: %t", state, attempt, status, alive)
	})
	rerouted := time.Since(frozen)
	require.NotZero(t, sessionEnded, "X completed while frozen A's session was alive")
	require.Contains(t, d.pg.LogTail(200), "idle-in-transaction timeout", "the server ended A's session")

	// Resume the zombie: its attempt on X must roll back.
	a.signal(syscall.SIGCONT)
	resumed := time.Now()
	var rollback time.Duration
	var rollbackLine string
	eventually(t, 30*time.Second, "A logs that its attempt on X rolled back", func(context.Context) (bool, string) {
		for _, line := range strings.Split(a.out.String(), "\n") {
			if strings.Contains(line, `"msg":"envelope attempt rolled back"`) && strings.Contains(line, fmt.Sprintf(`"envelope_id":%d,`, envID)) {
				rollback, rollbackLine = time.Since(resumed), line
				return true, ""
			}
		}
		return false, "no rollback line yet"
	})
	t.Logf("zombie A after SIGCONT: %s", rollbackLine)

	// A alone processes a second batch: the zombie came back healthy.
	require.NoError(t, b.stop(30*time.Second), "worker B exits 0 on SIGTERM")
	l.runRange(ctx, n, n+more)

	f := d.verify(l, scaledDuration(t, 2*time.Minute, 5*time.Minute))
	var xFinishes, xByA, xLedger int64
	var xWorker string
	var xAttempt int
	require.NoError(t, d.pool.QueryRow(ctx, `SELECT
		(SELECT count(*) FROM envelope_attempt WHERE envelope_id = $1 AND outcome IN ('done', 'ignored', 'failed')),
		(SELECT count(*) FROM envelope_attempt WHERE envelope_id = $1 AND worker = $2),
		(SELECT count(*) FROM ledger_transaction WHERE envelope_id = $1),
		(SELECT worker FROM envelope_attempt WHERE envelope_id = $1 AND outcome = 'done'),
		(SELECT attempt FROM envelope_attempt WHERE envelope_id = $1 AND outcome = 'done')`, envID, aName).
		Scan(&xFinishes, &xByA, &xLedger, &xWorker, &xAttempt))
	require.EqualValues(t, 1, xFinishes, "X finished once")
	require.Zero(t, xByA, "the zombie recorded an attempt on X")
	require.EqualValues(t, 1, xLedger, "X posted once")
	require.Equal(t, bName, xWorker, "X finished by B")
	require.GreaterOrEqual(t, xAttempt, 2, "X finished by a later attempt than the zombie's")
	// The job's row went with X done; while B waited, it carried River's
	// "Stuck job rescued" error, and no earlier attempt of it left a row.
	require.True(t, sawRescue, "X's job was rescued by River")
	earlier, err := d.scalar(`SELECT count(*) FROM envelope_attempt WHERE envelope_id = $1 AND job_id = $2 AND attempt < $3`, envID, jobID, xAttempt)
	require.NoError(t, err)
	require.Zero(t, earlier, "A's attempt on X left no row")
	byA, err := d.scalar(`SELECT count(*) FROM envelope_attempt a JOIN envelope e ON e.id = a.envelope_id
		WHERE a.worker = $1 AND a.outcome = 'done' AND e.delivery_id = ANY($2)`, aName, deliveryIDs(items[n:]))
	require.NoError(t, err)
	require.EqualValues(t, more-more/10, byA, "A (resumed) finished the second batch") // the tenth is ignored

	f.recovery = rerouted
	f.set("x_attempt", xAttempt)
	f.set("zombie_session_ended_after", sessionEnded)
	f.set("zombie_rollback_after_resume", rollback)
	f.set("zombie_second_batch", byA)
	require.NoError(t, a.stop(30*time.Second), "worker A exits 0 on SIGTERM")
	d.report(f)
}

func deliveryIDs(items []drillItem) []string {
	ids := make([]string, len(items))
	for i, it := range items {
		ids[i] = it.d.DeliveryID
	}
	return ids
}

// envelopeJob returns the envelope of it and its processing job.
func (d *drill) envelopeJob(it drillItem) (envID, jobID int64) {
	d.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(d.t, d.pool.QueryRow(ctx, `SELECT e.id, j.id FROM envelope e JOIN river_job j
		ON j.kind = 'process_envelope' AND (j.args->>'envelope_id')::bigint = e.id
		WHERE e.source = $1 AND e.delivery_id = $2`, it.source, it.d.DeliveryID).Scan(&envID, &jobID))
	return envID, jobID
}

// requireJob checks a River job's state and attempt.
func (d *drill) requireJob(jobID int64, state string, attempt int) {
	d.t.Helper()
	var s string
	var a int
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(d.t, d.pool.QueryRow(ctx, `SELECT state::text, attempt FROM river_job WHERE id = $1`, jobID).Scan(&s, &a))
	require.Equal(d.t, state, s, "job %d state", jobID)
	require.Equal(d.t, attempt, a, "job %d attempt", jobID)
}

// rowLock is a test transaction holding one envelope's row lock.
type rowLock struct {
	d   *drill
	pid int32 // the holding session
	tx  pgx.Tx
	c   *pgxpool.Conn
}

// lockEnvelope locks envelope id's row (SELECT ... FOR UPDATE, as
// envelope.Lock does) in a transaction of the test's own, until release.
func (d *drill) lockEnvelope(ctx context.Context, id int64) *rowLock {
	d.t.Helper()
	c, err := d.pool.Acquire(ctx)
	require.NoError(d.t, err)
	tx, err := c.Begin(ctx)
	require.NoError(d.t, err)
	l := &rowLock{d: d, tx: tx, c: c}
	d.t.Cleanup(l.release)
	require.NoError(d.t, tx.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&l.pid))
	_, err = tx.Exec(ctx, `SELECT 1 FROM envelope WHERE id = $1 FOR UPDATE`, id)
	require.NoError(d.t, err)
	return l
}

// blocked returns a worker session waiting for the lock, or 0.
func (l *rowLock) blocked() int32 {
	l.d.t.Helper()
	var pid int32
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	require.NoError(l.d.t, l.d.pool.QueryRow(ctx, `SELECT coalesce(min(pid), 0) FROM pg_stat_activity
		WHERE application_name = 'inbox-worker' AND $1 = ANY(pg_blocking_pids(pid))`, l.pid).Scan(&pid))
	return pid
}

// waitBlocked waits until a worker session waits for the lock and returns
// its pid. It polls every 2 ms: the caller usually has a job timeout to beat.
func (l *rowLock) waitBlocked(timeout time.Duration) int32 {
	l.d.t.Helper()
	var pid int32
	pgtest.EventuallyEvery(l.d.t, timeout, 2*time.Millisecond, "a worker session to wait for the test's row lock", func() (bool, string) {
		pid = l.blocked()
		return pid != 0, ""
	})
	return pid
}

// release ends the lock's transaction; safe to call twice.
func (l *rowLock) release() {
	if l.c == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = l.tx.Rollback(ctx)
	l.c.Release()
	l.c = nil
}

// TestDrillZombieFence: the same zombie, frozen before it holds X's row lock,
// so that it resumes with its transaction (and its job's context) alive while
// a later attempt of its job waits to process X. Here the attempt fence in
// worker.fence is what stops it: river_job says attempt 2 is running, A is
// attempt 1, so A must change nothing.
//
// Worker A (--max-workers 1) blocks on the test's lock on X and is frozen
// there. Its pause "past the rescue horizon" is simulated: the test moves the
// job's attempted_at ten minutes back (what a River leader whose clock runs
// ahead of the database would see), so that the job timeout can stay long
// (60 s) and A's context outlives the drill. Worker B then becomes leader
// (once A's lease runs out), rescues the job with River's own rescuer,
// fetches it as attempt 2 and waits for X's row lock behind A's session. A is
// resumed, the test releases its lock: A's session gets the row first, A
// fences and rolls back ("lost the job to another attempt"), then B
// processes X. recovery is the time from the release to X done.
func TestDrillZombieFence(t *testing.T) {
	t.Parallel()
	d := newDrill(t, "zombie_fence")
	n := scaled(t, 40, 400)
	host, err := os.Hostname()
	require.NoError(t, err)

	_, url := d.startIngest("127.0.0.1:0")
	items := drillDeliveries("zf", n)
	l := newLoad(d, items, func(int, int) string { return url })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	l.runRange(ctx, 0, n)
	require.EqualValues(t, n, l.acked.Load())
	envID, jobID := d.envelopeJob(items[1])

	long := []string{"--job-timeout", "60s", "--rescue-after", "61s"}
	lock := d.lockEnvelope(ctx, envID)
	a := d.startWorker(append(long, "--max-workers", "1")...)
	aName := host + ":" + strconv.Itoa(a.cmd.Process.Pid)
	aPID := lock.waitBlocked(time.Minute)
	a.signal(syscall.SIGSTOP)
	frozen := time.Now()
	require.Equal(t, aPID, lock.blocked(), "A's session stopped waiting before SIGSTOP")
	d.requireJob(jobID, "running", 1)
	_, err = d.pool.Exec(ctx, `UPDATE river_job SET attempted_at = attempted_at - interval '10 minutes' WHERE id = $1 AND state = 'running'`, jobID)
	require.NoError(t, err)

	b := d.startWorker(long...)
	bName := host + ":" + strconv.Itoa(b.cmd.Process.Pid)
	eventually(t, 2*time.Minute, "X's job rescued, and attempt 2 waiting for X's row lock behind A", func(ctx context.Context) (bool, string) {
		var state string
		var attempt int
		var waiting bool
		err := d.pool.QueryRow(ctx, `SELECT state::text, attempt,
			EXISTS (SELECT 1 FROM pg_stat_activity WHERE application_name = 'inbox-worker' AND pid <> $2 AND $2 = ANY(pg_blocking_pids(pid)))
			FROM river_job WHERE id = $1`, jobID, aPID).Scan(&state, &attempt, &waiting)
		if err != nil {
			return false, err.Error()
		}
		return state == "running" && attempt == 2 && waiting, fmt.Sprintf("job %s at attempt %d, a session waits behind A: %t", state, attempt, waiting)
	})
	paused := time.Since(frozen)
	a.signal(syscall.SIGCONT)
	require.Equal(t, aPID, lock.blocked(), "A's session still waits for X after SIGCONT")

	lock.release()
	released := time.Now()
	eventually(t, time.Minute, "X done", func(ctx context.Context) (bool, string) {
		var status, state string
		err := d.pool.QueryRow(ctx, `SELECT (SELECT status FROM envelope WHERE id = $1), coalesce((SELECT state::text FROM river_job WHERE id = $2), 'deleted')`,
			envID, jobID).Scan(&status, &state)
		if err != nil {
			return false, err.Error()
		}
		return status == "done" && state == "deleted", "envelope " + status + ", job " + state
	})
	rerouted := time.Since(released)
	var fenceLine string
	eventually(t, 30*time.Second, "A logs that the fence rolled its attempt on X back", func(context.Context) (bool, string) {
		for _, line := range strings.Split(a.out.String(), "\n") {
			if strings.Contains(line, `"msg":"envelope attempt rolled back"`) && strings.Contains(line, fmt.Sprintf(`"envelope_id":%d,`, envID)) {
				fenceLine = line
				return true, ""
			}
		}
		return false, "no rollback line yet"
	})
	t.Logf("zombie A after SIGCONT: %s", fenceLine)
	require.Contains(t, fenceLine, "lost the job to another attempt", "A was stopped by the fence")

	f := d.verify(l, scaledDuration(t, 2*time.Minute, 5*time.Minute))
	var xFinishes, xByA, xLedger int64
	var xWorker string
	var xAttempt int
	require.NoError(t, d.pool.QueryRow(ctx, `SELECT
		(SELECT count(*) FROM envelope_attempt WHERE envelope_id = $1 AND outcome IN ('done', 'ignored', 'failed')),
		(SELECT count(*) FROM envelope_attempt WHERE envelope_id = $1 AND worker = $2),
		(SELECT count(*) FROM ledger_transaction WHERE envelope_id = $1),
		(SELECT worker FROM envelope_attempt WHERE envelope_id = $1 AND outcome = 'done'),
		(SELECT attempt FROM envelope_attempt WHERE envelope_id = $1 AND outcome = 'done')`, envID, aName).
		Scan(&xFinishes, &xByA, &xLedger, &xWorker, &xAttempt))
	require.EqualValues(t, 1, xFinishes, "X finished once")
	require.Zero(t, xByA, "the zombie recorded an attempt on X")
	require.EqualValues(t, 1, xLedger, "X posted once")
	require.Equal(t, bName, xWorker, "X finished by B")
	require.GreaterOrEqual(t, xAttempt, 2)

	f.recovery = rerouted
	f.set("x_attempt", xAttempt) // 3: A's late failure report knocked B's attempt 2 out (River checks no attempt)
	f.set("zombie_paused", paused)
	require.NoError(t, b.stop(30*time.Second), "worker B exits 0 on SIGTERM")
	require.NoError(t, a.stop(30*time.Second), "worker A exits 0 on SIGTERM")
	d.report(f)
}
