package e2e

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/inboxhq/inbox/internal/pgtest"
)

// TestDrillPostgresRestart: stop PostgreSQL with pg_ctl stop -m immediate (a
// crash: no checkpoint, WAL replay on start) while a sender delivers, keep it
// down a while, start it again. Neither ingest nor the worker is restarted.
//
// During the outage ingest must answer every request within the sender's 5 s
// bound with 503 and a Retry-After (no 500, no hang, no dropped connection),
// and /readyz must say 503. After it, both processes must recover by
// themselves, and every acknowledged delivery must be there (the cluster
// keeps fsync and synchronous_commit on).
//
// recovery is the longest time from PostgreSQL accepting connections again
// to the later of ingest's first 202 (recovery_ingest) and the worker's
// first envelope processed (recovery_worker).
func TestDrillPostgresRestart(t *testing.T) {
	t.Parallel()
	d := newDrill(t, "postgres_restart")
	n := scaled(t, 300, 3000)
	outages := scaled(t, 1, 3)
	outage := scaledDuration(t, 2*time.Second, 5*time.Second)

	ing, url := d.startIngest("127.0.0.1:0")
	w := d.startWorker()
	l := newLoad(d, drillDeliveries("pr", n), func(int, int) string { return url })
	l.rate = float64(scaled(t, 60, 200))
	l.senders = scaled(t, 8, 16)
	done := l.start(5 * time.Minute)

	var worstIngest, worstWorker, worstStart time.Duration
	for k := 1; k <= outages; k++ {
		l.waitAcked(int64(n*k/(outages+1)), 2*time.Minute)
		require.NoError(t, d.pg.Stop(pgtest.StopImmediate))
		down := time.Now()
		// While it is down: readiness says so, quickly.
		code, retryAfter := d.get(url + "/readyz")
		require.Equal(t, http.StatusServiceUnavailable, code, "/readyz during the outage")
		require.NotEmpty(t, retryAfter, "/readyz 503 carries Retry-After")
		// The outage's length is the fault itself: a sleep is the point.
		time.Sleep(outage - time.Since(down))
		startBegin := time.Now()
		require.NoError(t, d.pg.Start())
		ready := time.Now()
		worstStart = max(worstStart, ready.Sub(startBegin))

		var recIngest, recWorker time.Duration = -1, -1
		eventually(t, 2*time.Minute, "ingest and worker working again after the restart", func(ctx context.Context) (bool, string) {
			if recIngest < 0 {
				recIngest = l.firstAcceptAfter(ready)
			}
			if recWorker < 0 {
				var n int64
				// processed_at is the server's clock_timestamp(): same host.
				err := d.pool.QueryRow(ctx, `SELECT count(*) FROM envelope WHERE processed_at > $1`, ready).Scan(&n)
				if err == nil && n > 0 {
					recWorker = time.Since(ready)
				}
			}
			return recIngest >= 0 && recWorker >= 0, "ingest recovered: " + recIngest.String() + ", worker: " + recWorker.String()
		})
		worstIngest, worstWorker = max(worstIngest, recIngest), max(worstWorker, recWorker)
		require.False(t, ing.exited(), "ingest exited during the outage")
		require.False(t, w.exited(), "worker exited during the outage")
	}
	l.wait(done)

	f := d.verify(l, scaledDuration(t, 2*time.Minute, 5*time.Minute))
	f.recovery = max(worstIngest, worstWorker)
	f.set("outages", outages)
	f.set("outage", outage)
	f.set("recovery_ingest", worstIngest)
	f.set("recovery_worker", worstWorker)
	f.set("pg_start", worstStart)
	l.mu.Lock()
	codes, timeouts, transport, missing, slowest := l.codes, l.timeouts, l.transportErrs, l.missingRetryAfter, l.maxLatency
	l.mu.Unlock()
	d.report(f)
	require.Zero(t, codes[http.StatusInternalServerError], "500s during the outage")
	require.Positive(t, codes[http.StatusServiceUnavailable], "no 503 during the outage: did the load miss it?")
	require.Zero(t, missing, "503s without Retry-After")
	require.Zero(t, timeouts, "requests unanswered within 5 s")
	require.Zero(t, transport, "requests with no HTTP answer (ingest stayed up)")
	require.Less(t, slowest, 5*time.Second)
	require.NoError(t, ing.stop(30*time.Second), "ingest exits 0 on SIGTERM")
	require.NoError(t, w.stop(30*time.Second), "worker exits 0 on SIGTERM")
}

// get fetches url and returns its status and Retry-After.
func (d *drill) get(url string) (int, string) {
	d.t.Helper()
	resp, err := d.client.Get(url)
	require.NoError(d.t, err, "GET %s", url)
	resp.Body.Close()
	return resp.StatusCode, resp.Header.Get("Retry-After")
}
