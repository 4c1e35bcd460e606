package e2e

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestDrillTerminateBackends: while the worker drains a backlog, terminate
// every one of its database sessions, repeatedly:
//
//	SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'inbox-worker'
//
// That cuts running jobs mid-transaction (and mid-COMMIT), River's listener
// and its leader's maintenance. The worker is not restarted: its pool must
// replace the connections, the attempts cut short must be retried, and a
// COMMIT that went through although its answer was lost must not be redone.
//
// Terminations are paced by progress (k/(rounds+1) of the backlog processed).
// recovery is the longest time from a termination to the processed count
// rising again.
func TestDrillTerminateBackends(t *testing.T) {
	t.Parallel()
	d := newDrill(t, "terminate_backends")
	n := scaled(t, 300, 5000)
	rounds := scaled(t, 3, 10)

	_, url := d.startIngest("127.0.0.1:0")
	l := newLoad(d, drillDeliveries("tb", n), func(int, int) string { return url })
	l.senders = scaled(t, 8, 16)
	l.wait(l.start(5 * time.Minute))

	w := d.startWorker()
	var worst time.Duration
	var terminated int64
	for k := 1; k <= rounds; k++ {
		d.waitProcessed(int64(n*k/(rounds+1))-1, 3*time.Minute)
		cut, err := d.scalar(`SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity
			WHERE application_name = 'inbox-worker') x`)
		require.NoError(t, err)
		at := time.Now()
		terminated += cut
		base, err := d.processed()
		require.NoError(t, err)
		seen, _ := d.waitProcessed(base, 3*time.Minute)
		worst = max(worst, seen.Sub(at))
		require.False(t, w.exited(), "worker exited after its sessions were terminated")
	}
	last := time.Now()

	f := d.verify(l, scaledDuration(t, 2*time.Minute, 5*time.Minute))
	f.recovery = worst
	f.set("rounds", rounds)
	f.set("sessions_terminated", terminated)
	f.set("drained_after_last_round", time.Since(last))
	require.NoError(t, w.stop(30*time.Second), "worker exits 0 on SIGTERM")
	d.report(f)
}
