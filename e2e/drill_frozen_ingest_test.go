package e2e

import (
	"context"
	"crypto/sha256"
	"net/http"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/inboxhq/inbox/internal/pgtest"
)

// TestDrillFrozenIngest: an ingest process frozen (SIGSTOP) in the middle of
// storing a delivery, its transaction open, must not keep that delivery id
// from being stored by another ingest for long: the provider resends it,
// maybe to another instance, and every resend must not be a 503 forever.
//
// Freezing ingest A mid-transaction deterministically: the test inserts the
// delivery's envelope row in a transaction of its own and leaves it
// uncommitted, so A's INSERT ... ON CONFLICT waits for it; the test SIGSTOPs
// A while it waits, then rolls back: A's session inserts the row and sits
// idle in transaction, frozen. The same delivery is then sent to ingest B
// until it is acknowledged.
func TestDrillFrozenIngest(t *testing.T) {
	t.Parallel()
	d := newDrill(t, "frozen_ingest")
	a, urlA := d.startIngest("127.0.0.1:0")
	_, urlB := d.startIngest("127.0.0.1:0")
	items := drillDeliveries("fi", 2)
	x := items[1]
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	conn, err := d.pool.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	tx, err := conn.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(context.Background()) //nolint:errcheck
	var lockPID int32
	require.NoError(t, tx.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&lockPID))
	sum := sha256.Sum256(x.d.Body)
	_, err = tx.Exec(ctx, `
		WITH e AS (
			INSERT INTO envelope (source, provider, delivery_id, event_type, body_sha256, body_size)
			VALUES ($1, 'standard', $2, 'payment.succeeded', $3, $4)
			RETURNING id, source, delivery_id)
		INSERT INTO envelope_key (delivery_id, source, envelope_id) SELECT delivery_id, source, id FROM e`,
		x.source, x.d.DeliveryID, sum[:], len(x.d.Body))
	require.NoError(t, err)

	sendA := make(chan int, 1)
	go func() {
		req, err := x.d.Request(ctx, urlA+"/webhooks/"+x.source)
		if err != nil {
			sendA <- -1
			return
		}
		resp, err := (&http.Client{Timeout: 2 * time.Minute}).Do(req)
		if err != nil {
			sendA <- -1
			return
		}
		resp.Body.Close()
		sendA <- resp.StatusCode
	}()
	var aPID int32
	pgtest.EventuallyEvery(t, 30*time.Second, 2*time.Millisecond, "ingest A to wait for the test's row", func() (bool, string) {
		require.NoError(t, d.pool.QueryRow(ctx, `SELECT coalesce(min(pid), 0) FROM pg_stat_activity
			WHERE application_name = 'inbox-ingest' AND $1 = ANY(pg_blocking_pids(pid))`, lockPID).Scan(&aPID))
		return aPID != 0, "ingest A never waited for the test's row"
	})
	a.signal(syscall.SIGSTOP)
	require.NoError(t, tx.Rollback(ctx))
	conn.Release()
	eventually(t, 10*time.Second, "A's session idle in transaction, holding the delivery id", func(ctx context.Context) (bool, string) {
		var s string
		err := d.pool.QueryRow(ctx, `SELECT coalesce((SELECT state FROM pg_stat_activity WHERE pid = $1), 'gone')`, aPID).Scan(&s)
		if err != nil {
			return false, err.Error()
		}
		return s == "idle in transaction", s
	})
	frozen := time.Now()

	// B must acknowledge the delivery while A stays frozen.
	l := newLoad(d, []drillItem{x}, func(int, int) string { return urlB })
	l.retryWait = 250 * time.Millisecond
	lctx, lcancel := context.WithTimeout(ctx, 45*time.Second)
	l.run(lctx)
	lcancel()
	l.mu.Lock()
	codes := l.codes
	l.mu.Unlock()
	blocked := time.Since(frozen)
	a.signal(syscall.SIGCONT)
	answerA := <-sendA
	t.Logf("DRILL frozen_ingest sent=1 acknowledged=%d blocked_for=%s codes=%v answer_to_A=%d",
		l.acked.Load(), blocked.Round(time.Millisecond), codes, answerA)
	require.EqualValues(t, 1, l.acked.Load(), "ingest B could not store the delivery while A was frozen holding it")
	// A's transaction was ended by the server: A must not acknowledge, and
	// must say so as "retry later", not as an internal error.
	require.Equal(t, http.StatusServiceUnavailable, answerA)
	require.Less(t, blocked, 20*time.Second, "the delivery id stayed blocked past the idle-in-transaction timeout")
}
