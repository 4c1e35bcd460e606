package e2e

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestDrillWorkerKill: kill -9 the worker repeatedly while it drains a
// backlog, restarting it after each kill. The jobs a killed worker was running
// stay `running` until the River leader's rescuer finds them past
// --rescue-after; their transactions died with the process, so rescue and
// retry must post each payment once.
//
// Kills are paced by progress: kill k happens once k/(kills+1) of the
// backlog is processed. recovery is the longest time from a restarted
// worker's "worker started" to the processed count rising again.
func TestDrillWorkerKill(t *testing.T) {
	t.Parallel()
	d := newDrill(t, "worker_kill")
	n := scaled(t, 300, 5000)
	kills := scaled(t, 3, 8)

	_, url := d.startIngest("127.0.0.1:0")
	l := newLoad(d, drillDeliveries("wk", n), func(int, int) string { return url })
	l.senders = scaled(t, 8, 16)
	l.wait(l.start(5 * time.Minute)) // the backlog, no worker running yet

	w := d.startWorker()
	var worst time.Duration
	for k := 1; k <= kills; k++ {
		d.waitProcessed(int64(n*k/(kills+1))-1, 3*time.Minute)
		w.kill9()
		w = d.startWorker()
		restarted := time.Now()
		base, err := d.processed()
		require.NoError(t, err)
		at, _ := d.waitProcessed(base, 3*time.Minute)
		worst = max(worst, at.Sub(restarted))
	}
	lastKill := time.Now()

	f := d.verify(l, scaledDuration(t, 2*time.Minute, 5*time.Minute))
	f.recovery = worst
	f.set("kills", kills)
	f.set("drained_after_last_kill", time.Since(lastKill))
	require.NoError(t, w.stop(30*time.Second), "worker exits 0 on SIGTERM")
	d.report(f)
}

// scaledDuration picks the small or the full bound.
func scaledDuration(t testing.TB, small, full time.Duration) time.Duration {
	if drillFull(t) {
		return full
	}
	return small
}
