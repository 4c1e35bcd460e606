package e2e

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/inboxhq/inbox/internal/pgtest"
)

// make run and make stop, as a newcomer uses them (scripts/run-local, on a
// database of its own and free ports): one "ready" line once ingest and the
// worker answer, naming the URLs; the binaries it built say their revision
// (--version), not "(devel)"; a second make run is refused while one runs;
// make stop ends it, both processes drained, exit status 0.
func TestMakeRunAndStop(t *testing.T) {
	root, err := filepath.Abs("..")
	require.NoError(t, err)
	if _, err := os.Stat(filepath.Join(root, ".git")); err != nil {
		t.Skip("not a git checkout: make build stamps the revision from git")
	}
	pidfile := filepath.Join(root, ".tmp", "run-local.pid")
	if pid, err := os.ReadFile(pidfile); err == nil && !pgtest.InCI() &&
		exec.Command("kill", "-0", strings.TrimSpace(string(pid))).Run() == nil {
		t.Skip("a make run is running here (.tmp/run-local.pid): this test would stop it")
	}
	dbURL := pgtest.NewURL(t)
	ingestAddr, ingestAdmin, workerAdmin := freeAddr(t), freeAddr(t), freeAddr(t)
	env := append(os.Environ(), "DATABASE_URL="+dbURL, "INGEST_ADDR="+ingestAddr,
		"INGEST_ADMIN_ADDR="+ingestAdmin, "WORKER_ADMIN_ADDR="+workerAdmin)

	cmd := exec.Command("bash", "scripts/run-local")
	cmd.Dir, cmd.Env = root, env
	// Its own process group, so that a failed test can end the binaries it
	// started too (they hold the output pipe open).
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	cmd.Stderr = cmd.Stdout
	require.NoError(t, cmd.Start())
	// done is closed once make run has exited and its output is read;
	// waitErr is then its exit status.
	done := make(chan struct{})
	var waitErr error
	var lines []string
	ready := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines = append(lines, sc.Text())
			if strings.HasPrefix(sc.Text(), "run-local: ready in ") {
				select { // a second ready line is counted at the end, never blocks
				case ready <- sc.Text():
				default:
				}
			}
		}
		waitErr = cmd.Wait()
		close(done)
	}()
	t.Cleanup(func() {
		select {
		case <-done:
		default:
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-done
			// Killed, its EXIT trap did not run: the pid file would make
			// every later make run (and this test) think one is running.
			_ = os.Remove(pidfile)
		}
		if t.Failed() {
			t.Logf("make run's output:\n%s", strings.Join(lines, "\n"))
		}
	})

	var line string
	select {
	case line = <-ready:
	case <-done:
		t.Fatalf("make run ended before it was ready: %v", waitErr)
	case <-time.After(3 * time.Minute):
		t.Fatal("no ready line in 3 minutes")
	}
	require.Regexp(t, `^run-local: ready in \d+ s: ingest http://`+regexp.QuoteMeta(ingestAddr)+`/webhooks/<source>, console http://`+
		regexp.QuoteMeta(workerAdmin)+`/console/, River UI http://`+regexp.QuoteMeta(workerAdmin)+`/riverui/ \(make stop or Ctrl-C stops both\)$`, line)

	version, err := exec.Command(filepath.Join(root, "bin", "worker"), "--version").CombinedOutput()
	require.NoError(t, err, string(version))
	require.NotContains(t, string(version), "(devel)", "make run builds with make build's flags")
	require.NotContains(t, string(version), "revision unknown")

	second := exec.Command("bash", "scripts/run-local")
	second.Dir, second.Env = root, env
	msg, err := second.CombinedOutput()
	require.Error(t, err, "a second make run is refused")
	require.Contains(t, string(msg), "already running")

	stop := exec.CommandContext(context.Background(), "make", "-s", "stop")
	stop.Dir = root
	msg, err = stop.CombinedOutput()
	require.NoError(t, err, string(msg))
	require.Contains(t, string(msg), "run-local: stopped")
	select {
	case <-done:
		require.NoError(t, waitErr, "make run exits 0 after make stop")
	case <-time.After(70 * time.Second):
		t.Fatal("make run still running after make stop")
	}
	require.Equal(t, 1, countPrefix(lines, "run-local: ready in "), "one ready line")
	require.Contains(t, strings.Join(lines, "\n"), "run-local: stopped")
	_, err = os.Stat(pidfile)
	require.True(t, os.IsNotExist(err), "the pid file is gone")
}

func countPrefix(lines []string, prefix string) int {
	n := 0
	for _, l := range lines {
		if strings.HasPrefix(l, prefix) {
			n++
		}
	}
	return n
}
