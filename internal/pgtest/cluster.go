package pgtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Cluster is a throwaway PostgreSQL server owned by one test: its own data
// directory (initdb), its own port on 127.0.0.1, and its own postmaster, so
// a test may stop it abruptly (Stop(StopImmediate) is a crash: no
// checkpoint, WAL replay on Start) without disturbing any other test.
//
// Durability is PostgreSQL's default (fsync and synchronous_commit on): a
// transaction whose COMMIT returned survives an immediate stop, which is what
// failure drills check. Authentication is trust, for user postgres, on
// 127.0.0.1 only; there is no Unix socket.
//
// When the test process runs as root (initdb and postgres refuse root), the
// server runs as the postgres system user, or as a system user inboxpg that
// StartCluster creates when there is no postgres user.
//
// The cluster is stopped and its files removed when the test ends. A test
// binary killed before its cleanups run (a -timeout panic) leaves the server
// running: find it with `ps aux | grep inbox-pgcluster-`.
type Cluster struct {
	tb      testing.TB
	bindir  string
	base    string // holds data/ and server.log
	dataDir string
	logPath string
	user    string // runs the server; "" when we are not root

	mu      sync.Mutex
	port    int
	running bool
}

// StopMode is pg_ctl's shutdown mode.
type StopMode string

// Shutdown modes (pg_ctl stop -m).
const (
	// StopSmart waits for every client to disconnect.
	StopSmart StopMode = "smart"
	// StopFast rolls back open transactions and checkpoints.
	StopFast StopMode = "fast"
	// StopImmediate kills the server processes at once, like a crash: no
	// checkpoint, and crash recovery on the next Start.
	StopImmediate StopMode = "immediate"
)

// clusterSettings are appended to postgresql.conf. fsync, synchronous_commit
// and full_page_writes keep their defaults (on): drills crash the server and
// count on acknowledged commits surviving.
const clusterSettings = `
# pgtest.Cluster
listen_addresses = '127.0.0.1'
unix_socket_directories = ''
max_connections = 100
shared_buffers = 32MB
max_wal_size = 256MB
lc_messages = 'C'
log_line_prefix = '%m [%p] %q%a '
log_min_messages = warning
`

// StartCluster creates a cluster with initdb in a fresh temporary directory,
// starts it on a free port and returns it running; it is stopped (immediate
// mode) and removed when t ends. It skips t when no PostgreSQL server
// binaries are installed (fails it instead when CI is true, so that CI cannot
// silently skip the tests that need a cluster), and fails t on any other
// problem.
//
// The binaries come from `pg_config --bindir`, else the newest
// /usr/lib/postgresql/*/bin, else PATH.
func StartCluster(t testing.TB) *Cluster {
	t.Helper()
	bindir, err := serverBinDir()
	if err != nil {
		const msg = "pgtest: no PostgreSQL server binaries (initdb, pg_ctl, postgres): %v; install PostgreSQL to run this test"
		// In CI a skip would hide the drills: there, a missing server
		// is a failure of the environment.
		if InCI() {
			t.Fatalf(msg+" (CI is set: a failure, not a skip)", err)
		}
		t.Skipf(msg+" (SKIPPED; with CI=true this fails)", err)
	}
	var runAs string
	if os.Geteuid() == 0 {
		if runAs, err = serverUser(); err != nil {
			t.Fatalf("pgtest: %v", err)
		}
	}
	c := newCluster(t, bindir, runAs)

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// --no-sync: initdb's files need not reach the disk before the server
	// starts; everything the server writes afterwards is fsynced as usual.
	if out, err := c.run(ctx, filepath.Join(bindir, "initdb"), "-D", c.dataDir, "-U", "postgres",
		"--auth=trust", "-E", "UTF8", "--locale=C", "--no-sync"); err != nil {
		t.Fatalf("pgtest: initdb: %v\n%s", err, out)
	}
	conf, err := os.OpenFile(filepath.Join(c.dataDir, "postgresql.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	_, err = conf.WriteString(clusterSettings)
	if cerr := conf.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatalf("pgtest: write postgresql.conf: %v", err)
	}

	c.startOnFreePort(t)
	return c
}

// newCluster returns a Cluster of files to be: a fresh temporary directory
// the server's user owns, removed (the server stopped) when t ends.
func newCluster(t testing.TB, bindir, serverUser string) *Cluster {
	t.Helper()
	c := &Cluster{tb: t, bindir: bindir, user: serverUser}
	// Not t.TempDir(): its parents are private to us, and the server's user
	// must reach the data directory when we are root.
	var err error
	if c.base, err = os.MkdirTemp("", "inbox-pgcluster-"); err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	c.dataDir = filepath.Join(c.base, "data")
	c.logPath = filepath.Join(c.base, "server.log")
	t.Cleanup(c.cleanup)
	if c.user != "" {
		u, err := user.Lookup(c.user)
		if err != nil {
			t.Fatalf("pgtest: %v", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chown(c.base, uid, gid); err != nil {
			t.Fatalf("pgtest: %v", err)
		}
	}
	return c
}

// startOnFreePort starts c on a free port. A port free now can be taken
// before the server binds it (by another test binary's cluster): it tries a
// few.
func (c *Cluster) startOnFreePort(t testing.TB) {
	t.Helper()
	for i := 0; ; i++ {
		port, err := freePort()
		if err != nil {
			t.Fatalf("pgtest: %v", err)
		}
		if err := c.setPort(port); err != nil {
			t.Fatalf("pgtest: %v", err)
		}
		err = c.Start()
		if err == nil {
			return
		}
		if i == 4 || !strings.Contains(c.LogTail(20), "could not bind") {
			t.Fatalf("pgtest: %v", err)
		}
	}
}

// URL returns the URL of the cluster's postgres database, as superuser
// postgres.
func (c *Cluster) URL() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", c.Port())
}

// Port returns the TCP port the cluster listens on (the same across Stop and
// Start).
func (c *Cluster) Port() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.port
}

// DataDir returns the cluster's data directory.
func (c *Cluster) DataDir() string { return c.dataDir }

// Running reports whether the cluster was started and not stopped since.
func (c *Cluster) Running() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.running
}

// Stop stops the server with pg_ctl stop -m mode and waits until it is gone.
// Stopping a stopped cluster does nothing. Safe to call from any goroutine.
func (c *Cluster) Stop(mode StopMode) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.running {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	if out, err := c.run(ctx, filepath.Join(c.bindir, "pg_ctl"), "stop", "-D", c.dataDir, "-m", string(mode), "-w", "-t", "60"); err != nil {
		return fmt.Errorf("pg_ctl stop -m %s: %w\n%s", mode, err, out)
	}
	c.running = false
	return nil
}

// Start starts the server (after a Stop, with crash recovery when that was
// immediate) on the same port and returns once it accepts connections.
// Starting a running cluster does nothing. Safe to call from any goroutine.
func (c *Cluster) Start() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.running {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	// With -l the server's output goes to the log, so it holds none of our
	// descriptors (a pipe it kept would make this command never return).
	if out, err := c.run(ctx, filepath.Join(c.bindir, "pg_ctl"), "start", "-D", c.dataDir, "-l", c.logPath, "-w", "-t", "60"); err != nil {
		return fmt.Errorf("pg_ctl start (port %d): %w\n%s\nserver log:\n%s", c.port, err, out, c.LogTail(20))
	}
	c.running = true
	return nil
}

// LogTail returns the last n lines of the server's log.
func (c *Cluster) LogTail(n int) string {
	b, err := os.ReadFile(c.logPath)
	if err != nil {
		return "(no server log: " + err.Error() + ")"
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func (c *Cluster) setPort(port int) error {
	c.mu.Lock()
	c.port = port
	c.mu.Unlock()
	// Later lines win: a retry with another port appends another line.
	f, err := os.OpenFile(filepath.Join(c.dataDir, "postgresql.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(f, "port = %d\n", port)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

func (c *Cluster) cleanup() {
	if c.Running() {
		if err := c.Stop(StopImmediate); err != nil {
			c.tb.Logf("pgtest: stop cluster: %v", err)
		}
	}
	if c.tb.Failed() {
		c.tb.Logf("pgtest: cluster on port %d, last lines of its log:\n%s", c.Port(), c.LogTail(40))
	}
	if c.base != "" {
		_ = os.RemoveAll(c.base)
	}
}

// run runs a server binary, as the server's user when we are root, from /
// (that user may not be able to enter our working directory).
func (c *Cluster) run(ctx context.Context, name string, args ...string) (string, error) {
	var cmd *exec.Cmd
	switch {
	case c.user == "":
		cmd = exec.CommandContext(ctx, name, args...)
	case hasRunuser():
		cmd = exec.CommandContext(ctx, "runuser", append([]string{"-u", c.user, "--", name}, args...)...)
	default:
		// su hands the words after "user --" to the shell as $0, $1, ...
		cmd = exec.CommandContext(ctx, "su", append([]string{"-s", "/bin/sh", "-c", `exec "$0" "$@"`, c.user, "--", name}, args...)...)
	}
	cmd.Dir = "/"
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.WaitDelay = 5 * time.Second
	err := cmd.Run()
	return out.String(), err
}

var runuserPath = sync.OnceValue(func() string {
	p, _ := exec.LookPath("runuser")
	return p
})

func hasRunuser() bool { return runuserPath() != "" }

// InCI reports whether the CI environment variable is set to a true value
// (true, 1, TRUE, ...), as CI services and .ci/run set it. There, tests that
// would skip for want of something in the environment fail instead.
func InCI() bool {
	ci, _ := strconv.ParseBool(os.Getenv("CI"))
	return ci
}

// serverBinDir finds the directory holding initdb, pg_ctl and postgres.
func serverBinDir() (string, error) {
	ok := func(dir string) bool {
		for _, b := range []string{"initdb", "pg_ctl", "postgres"} {
			if fi, err := os.Stat(filepath.Join(dir, b)); err != nil || fi.IsDir() {
				return false
			}
		}
		return true
	}
	if out, err := exec.Command("pg_config", "--bindir").Output(); err == nil {
		if d := strings.TrimSpace(string(out)); d != "" && ok(d) {
			return d, nil
		}
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return pgVersion(dirs[i]) > pgVersion(dirs[j]) })
	for _, d := range dirs {
		if ok(d) {
			return d, nil
		}
	}
	if p, err := exec.LookPath("pg_ctl"); err == nil {
		if real, err := filepath.EvalSymlinks(p); err == nil && ok(filepath.Dir(real)) {
			return filepath.Dir(real), nil
		}
		if ok(filepath.Dir(p)) {
			return filepath.Dir(p), nil
		}
	}
	return "", errors.New("not found via pg_config --bindir, /usr/lib/postgresql/*/bin or PATH")
}

// pgVersion reads the major version from /usr/lib/postgresql/VERSION/bin.
func pgVersion(bindir string) float64 {
	v, _ := strconv.ParseFloat(filepath.Base(filepath.Dir(bindir)), 64)
	return v
}

var (
	userOnce sync.Once
	userName string
	userErr  error
)

// serverUser returns the unprivileged user that runs the server for root:
// postgres when it exists, else inboxpg, created when missing.
func serverUser() (string, error) {
	userOnce.Do(func() {
		for _, name := range []string{"postgres", "inboxpg"} {
			if _, err := user.Lookup(name); err == nil {
				userName = name
				return
			}
		}
		out, err := exec.Command("useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", "inboxpg").CombinedOutput()
		// Another test binary may have created it meanwhile.
		if _, lerr := user.Lookup("inboxpg"); lerr != nil {
			userErr = fmt.Errorf("running as root and there is no postgres user; useradd inboxpg: %v: %s", err, out)
			return
		}
		userName = "inboxpg"
	})
	return userName, userErr
}

var (
	portMu    sync.Mutex
	portsUsed = map[int]bool{}
)

// freePort returns a port on 127.0.0.1 that nothing listens on now, below
// Linux's ephemeral range (32768 and up) so that no client connection's
// local port takes it while a cluster is stopped, and never the same twice
// in one process.
func freePort() (int, error) {
	portMu.Lock()
	defer portMu.Unlock()
	for range 200 {
		p := 20000 + rand.IntN(12000)
		if portsUsed[p] {
			continue
		}
		ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			continue
		}
		ln.Close()
		portsUsed[p] = true
		return p, nil
	}
	return 0, errors.New("no free port in 20000-31999")
}

// StartStandby makes a hot standby of c with PostgreSQL's streaming
// replication (pg_basebackup -R: a copy of c's data directory that follows
// c's WAL), starts it on a free port and returns it running; it is stopped
// and removed when t ends. It reads what c has committed, a moment later,
// and refuses writes.
func (c *Cluster) StartStandby(t testing.TB) *Cluster {
	t.Helper()
	s := newCluster(t, c.bindir, c.user)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// -X stream: the WAL written during the copy comes with it; -R: the
	// copy starts as a standby of c (standby.signal, primary_conninfo).
	if out, err := s.run(ctx, filepath.Join(c.bindir, "pg_basebackup"), "-h", "127.0.0.1", "-p", strconv.Itoa(c.Port()),
		"-U", "postgres", "-D", s.dataDir, "-R", "-X", "stream", "--no-sync", "--checkpoint=fast"); err != nil {
		t.Fatalf("pgtest: pg_basebackup: %v\n%s", err, out)
	}
	s.startOnFreePort(t)
	return s
}
