package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/inboxhq/inbox/internal/pgtest"
	"github.com/inboxhq/inbox/internal/testlog"
)

// binDir holds the binaries built once for the package.
var binDir string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "inbox-e2e-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	args := []string{"build", "-o", dir + string(os.PathSeparator)}
	if raceEnabled {
		args = append(args, "-race")
	}
	args = append(args, "../cmd/...") // every binary: TestVersionEveryBinary runs each
	cmd := exec.Command("go", args...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build binaries:", err)
		os.Exit(1)
	}
	binDir = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// proc is a running binary.
type proc struct {
	t    testing.TB
	name string
	cmd  *exec.Cmd
	out  *testlog.Buffer
	done chan struct{}
	err  error
}

// start runs bin with args and env; its log lines (stderr) go to lines
// and, with its stdout, to the output kept for the test log.
func start(t testing.TB, name string, env []string, args ...string) (*proc, <-chan string) {
	t.Helper()
	cmd := exec.Command(filepath.Join(binDir, name), args...)
	cmd.Env = append(os.Environ(), env...)
	out := &testlog.Buffer{}
	cmd.Stdout = out
	lines := make(chan string, 64)
	// A Writer, not a pipe read by a goroutine: Wait returns only once
	// exec has copied all of stderr, so out is whole when the process is.
	cmd.Stderr = &lineTee{out: out, lines: lines}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &proc{t: t, name: name, cmd: cmd, out: out, done: make(chan struct{})}
	go func() { p.err = cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			t.Logf("%s output:\n%s", name, tail(out.String(), 60))
		}
	})
	return p, lines
}

// stop sends SIGTERM and waits for a clean exit.
func (p *proc) stop(timeout time.Duration) error {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return p.err
	case <-time.After(timeout):
		_ = p.cmd.Process.Kill()
		return fmt.Errorf("%s did not exit within %s of SIGTERM", p.name, timeout)
	}
}

func tail(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// lineTee writes everything to out and sends each complete line to lines,
// dropping it when nobody is reading (out keeps it).
type lineTee struct {
	out     io.Writer
	lines   chan<- string
	partial []byte
}

func (w *lineTee) Write(p []byte) (int, error) {
	_, _ = w.out.Write(p)
	w.partial = append(w.partial, p...)
	for {
		i := bytes.IndexByte(w.partial, '\n')
		if i < 0 {
			return len(p), nil
		}
		select {
		case w.lines <- string(w.partial[:i]):
		default:
		}
		w.partial = w.partial[i+1:]
	}
}

// waitLog waits for a JSON log line whose msg is msg and returns it
// decoded.
func waitLog(t testing.TB, lines <-chan string, msg string, timeout time.Duration) map[string]any {
	t.Helper()
	deadline := time.After(timeout)
	for {
		select {
		case l := <-lines:
			var rec map[string]any
			if json.Unmarshal([]byte(l), &rec) == nil && rec["msg"] == msg {
				return rec
			}
		case <-deadline:
			t.Fatalf("no log line %q within %s", msg, timeout)
		}
	}
}

// waitListen waits for the log line msg ("ingest listening", "admin
// listening") and returns the base URL of the address it names.
func waitListen(t testing.TB, lines <-chan string, msg string, timeout time.Duration) string {
	t.Helper()
	addr, _ := waitLog(t, lines, msg, timeout)["addr"].(string)
	if addr == "" {
		t.Fatalf("log line %q names no addr", msg)
	}
	return "http://" + addr
}

// eventually is pgtest.EventuallyEvery polling every 50 ms, giving each
// call of cond a context that ends after 5 s (a query on a process that is
// being stopped must not hang the test).
func eventually(t testing.TB, timeout time.Duration, what string, cond func(ctx context.Context) (bool, string)) {
	t.Helper()
	pgtest.EventuallyEvery(t, timeout, 50*time.Millisecond, what, func() (bool, string) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return cond(ctx)
	})
}
