package e2e

import (
	"context"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestDrillFrozenPostgres: PostgreSQL stops answering without going away
// (every server process SIGSTOPped: a storage stall, a frozen VM) while a
// sender delivers. Connections are accepted by the kernel and then hang, so
// only ingest's own bounds (connect timeout, --store-timeout) can answer: the
// drill requires every request answered within 5 s, with 503 and
// Retry-After while the server is frozen, and both processes working again
// once it is thawed (SIGCONT), neither restarted.
func TestDrillFrozenPostgres(t *testing.T) {
	t.Parallel()
	d := newDrill(t, "frozen_postgres")
	n := scaled(t, 200, 2000)
	freeze := scaledDuration(t, 4*time.Second, 8*time.Second)

	ing, url := d.startIngest("127.0.0.1:0")
	w := d.startWorker()
	l := newLoad(d, drillDeliveries("fp", n), func(int, int) string { return url })
	l.rate = float64(scaled(t, 50, 200))
	l.senders = scaled(t, 8, 16)
	done := l.start(5 * time.Minute)

	l.waitAcked(int64(n/2), 2*time.Minute)
	pids := serverPIDs(t, d.pg.DataDir())
	for _, pid := range pids {
		require.NoError(t, syscall.Kill(pid, syscall.SIGSTOP))
	}
	thawed := false
	thaw := func() {
		if !thawed {
			for _, pid := range pids {
				_ = syscall.Kill(pid, syscall.SIGCONT)
			}
			thawed = true
		}
	}
	t.Cleanup(thaw)
	frozenAt := time.Now()
	code, retryAfter := d.get(url + "/readyz")
	require.Equal(t, http.StatusServiceUnavailable, code, "/readyz while the database is frozen")
	require.NotEmpty(t, retryAfter)
	// The freeze's length is the fault itself.
	time.Sleep(freeze - time.Since(frozenAt))
	thaw()
	at := time.Now()

	var recIngest, recWorker time.Duration = -1, -1
	eventually(t, 2*time.Minute, "ingest and worker working again after the thaw", func(ctx context.Context) (bool, string) {
		if recIngest < 0 {
			recIngest = l.firstAcceptAfter(at)
		}
		if recWorker < 0 {
			var c int64
			if err := d.pool.QueryRow(ctx, `SELECT count(*) FROM envelope WHERE processed_at > $1`, at).Scan(&c); err == nil && c > 0 {
				recWorker = time.Since(at)
			}
		}
		return recIngest >= 0 && recWorker >= 0, "ingest: " + recIngest.String() + ", worker: " + recWorker.String()
	})
	require.False(t, ing.exited(), "ingest exited during the freeze")
	require.False(t, w.exited(), "worker exited during the freeze")
	l.wait(done)

	f := d.verify(l, scaledDuration(t, 2*time.Minute, 5*time.Minute))
	f.recovery = max(recIngest, recWorker)
	f.set("freeze", freeze)
	f.set("recovery_ingest", recIngest)
	f.set("recovery_worker", recWorker)
	l.mu.Lock()
	codes, timeouts, transport, missing, slowest := l.codes, l.timeouts, l.transportErrs, l.missingRetryAfter, l.maxLatency
	l.mu.Unlock()
	d.report(f)
	require.Positive(t, codes[http.StatusServiceUnavailable], "no 503 while frozen: did the load miss it?")
	require.Zero(t, missing, "503s without Retry-After")
	require.Zero(t, timeouts, "requests unanswered within 5 s")
	require.Zero(t, transport, "requests with no HTTP answer")
	require.Less(t, slowest, 5*time.Second)
	require.NoError(t, ing.stop(30*time.Second), "ingest exits 0 on SIGTERM")
	require.NoError(t, w.stop(30*time.Second), "worker exits 0 on SIGTERM")
}

// serverPIDs returns the cluster's postmaster and its children.
func serverPIDs(t testing.TB, dataDir string) []int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dataDir, "postmaster.pid"))
	require.NoError(t, err)
	pm, err := strconv.Atoi(strings.TrimSpace(strings.SplitN(string(b), "\n", 2)[0]))
	require.NoError(t, err)
	pids := []int{pm}
	out, _ := exec.Command("pgrep", "-P", strconv.Itoa(pm)).Output()
	for _, f := range strings.Fields(string(out)) {
		if pid, err := strconv.Atoi(f); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids
}
