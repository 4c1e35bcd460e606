package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestDrillIngestKill: kill -9 ingest repeatedly while a sender delivers,
// restarting it on the same port after each kill. The sender behaves like a
// provider: whatever got no 2xx (connection refused or reset) is sent again
// with the same delivery id and body. A delivery that was committed just
// before a kill, but never answered, must come back 200 duplicate on resend
// (committed_unacked counts them); one acknowledged must never be missing.
//
// Kills are paced by progress: kill k once k/(kills+1) of the deliveries are
// acknowledged. recovery is the longest time from a restarted ingest
// listening to its first 2xx.
func TestDrillIngestKill(t *testing.T) {
	t.Parallel()
	d := newDrill(t, "ingest_kill")
	n := scaled(t, 300, 4000)
	kills := scaled(t, 3, 8)

	addr := freeAddr(t)
	ing, url := d.startIngest(addr)
	w := d.startWorker()
	l := newLoad(d, drillDeliveries("ik", n), func(int, int) string { return url })
	l.rate = float64(scaled(t, 100, 400))
	l.senders = scaled(t, 8, 16)
	done := l.start(5 * time.Minute)

	var worst, worstDown time.Duration
	for k := 1; k <= kills; k++ {
		l.waitAcked(int64(n*k/(kills+1)), 2*time.Minute)
		killed := time.Now()
		ing.kill9()
		ing, _ = d.startIngest(addr)
		listening := time.Now()
		var rec time.Duration
		eventually(t, time.Minute, "a 2xx from the restarted ingest", func(context.Context) (bool, string) {
			rec = l.firstAckAfter(listening)
			return rec >= 0, "none yet"
		})
		worst = max(worst, rec)
		worstDown = max(worstDown, listening.Add(rec).Sub(killed))
	}
	l.wait(done)

	f := d.verify(l, scaledDuration(t, 2*time.Minute, 5*time.Minute))
	f.recovery = worst
	f.set("kills", kills)
	f.set("max_unavailable", worstDown)
	require.NoError(t, ing.stop(30*time.Second), "ingest exits 0 on SIGTERM")
	require.NoError(t, w.stop(30*time.Second), "worker exits 0 on SIGTERM")
	d.report(f)
}
