package deploy_test

import (
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"
)

type composeService struct {
	Image       string            `yaml:"image"`
	User        string            `yaml:"user"`
	Entrypoint  []string          `yaml:"entrypoint"`
	Volumes     []string          `yaml:"volumes"`
	Build       any               `yaml:"build"`
	PullPolicy  string            `yaml:"pull_policy"`
	Command     []string          `yaml:"command"`
	Environment map[string]string `yaml:"environment"`
	Ports       []string          `yaml:"ports"`
	Healthcheck *struct {
		Test []string `yaml:"test"`
	} `yaml:"healthcheck"`
	DependsOn map[string]struct {
		Condition string `yaml:"condition"`
	} `yaml:"depends_on"`
}

func composeServices(t *testing.T) map[string]composeService {
	t.Helper()
	return composeFile(t, "../docker-compose.yml")
}

func composeFile(t *testing.T, path string) map[string]composeService {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	var f struct {
		Services map[string]composeService `yaml:"services"`
	}
	require.NoError(t, yaml.Unmarshal(b, &f)) // yaml.v3 applies the <<: merge keys
	require.NotEmpty(t, f.Services)
	return f.Services
}

// hostPort returns the host side of a "127.0.0.1:HOST:CONTAINER" mapping
// whose container port is container, and its host address.
func hostPort(ports []string, container string) (addr, port string) {
	for _, p := range ports {
		parts := strings.Split(p, ":")
		if len(parts) == 3 && parts[2] == container {
			return parts[0], parts[1]
		}
	}
	return "", ""
}

// TestComposeIsALocalDeployment: docker-compose.yml (which no test starts:
// CI has no Docker engine) builds one image, pins the others, health-checks
// ingest and the worker through their own --probe against the admin
// listener it publishes on the host's loopback, makes the demo wait for a
// healthy ingest, and keeps PostgreSQL off scripts/dev-db's port.
func TestComposeIsALocalDeployment(t *testing.T) {
	t.Parallel()
	svcs := composeServices(t)

	var builders []string
	for name, s := range svcs {
		if s.Build != nil {
			builders = append(builders, name)
			continue
		}
		if s.Image == "inbox:dev" {
			require.Equal(t, "never", s.PullPolicy, "%s: inbox:dev is built here, never pulled", name)
			continue
		}
		// Another image: an exact version (x.y...) or a digest.
		require.Regexp(t, `(:\d+\.\d+[^:@]*|@sha256:[0-9a-f]{64})$`, s.Image, "%s: pin the image to an exact version or digest", name)
	}
	require.Equal(t, []string{"migrate"}, builders, "one service builds the image")
	require.Equal(t, "inbox:dev", svcs["migrate"].Image)

	for name, admin := range map[string]string{"ingest": "INGEST_ADMIN_ADDR", "worker": "WORKER_ADMIN_ADDR"} {
		s := svcs[name]
		_, port, err := net.SplitHostPort(s.Environment[admin])
		require.NoError(t, err, "%s: %s", name, admin)
		addr, host := hostPort(s.Ports, port)
		require.Equal(t, "127.0.0.1", addr, "%s: the admin port is published on the host's loopback only", name)
		require.NotEmpty(t, host)
		require.NotNil(t, s.Healthcheck, "%s: healthcheck", name)
		require.Equal(t, []string{"CMD", name, "--probe", "http://127.0.0.1:" + port + "/readyz"}, s.Healthcheck.Test, name)
	}
	require.Equal(t, []string{"worker", "run"}, svcs["worker"].Command)
	require.Equal(t, "service_healthy", svcs["demo"].DependsOn["ingest"].Condition, "the demo waits for ingest's readiness")
	for name, s := range svcs {
		for _, p := range s.Ports {
			require.True(t, strings.HasPrefix(p, "127.0.0.1:"), "%s publishes %s beyond loopback", name, p)
		}
	}

	// PostgreSQL's host port: not scripts/dev-db's throwaway cluster's, and
	// the one dev-db looks for the compose server on.
	_, pgPort := hostPort(svcs["postgres"].Ports, "5432")
	require.NotEmpty(t, pgPort)
	devdb, err := os.ReadFile("../scripts/dev-db")
	require.NoError(t, err)
	m := regexp.MustCompile(`PORT="\$\{INBOX_PG_PORT:-(\d+)\}"`).FindSubmatch(devdb)
	require.NotNil(t, m, "scripts/dev-db's default port")
	require.NotEqual(t, string(m[1]), pgPort, "compose's PostgreSQL and dev-db's cluster on one port")
	require.Contains(t, string(devdb), `COMPOSE_URL="postgres://postgres:inbox@127.0.0.1:`+pgPort+`/`)
}

// TestComposeReplicaOverride: docker-compose.replica.yml adds a streaming
// standby of postgres (pg_basebackup -R from it, on its own volume, the
// same pinned image, loopback only), lets the primary accept its
// replication connection (the init script, which the primary mounts), and
// points the worker's console reads at it. (The standby itself is tested
// for real in internal/console: TestConsoleReadsAStandby.)
func TestComposeReplicaOverride(t *testing.T) {
	t.Parallel()
	base := composeServices(t)
	over := composeFile(t, "../docker-compose.replica.yml")
	s := over["postgres-standby"]
	require.Equal(t, base["postgres"].Image, s.Image, "the standby runs the primary's version")
	require.Equal(t, "postgres", s.User)
	script := strings.Join(s.Entrypoint, "\n")
	require.Contains(t, script, `pg_basebackup -h postgres -U postgres -D "$$PGDATA" -R -X stream`)
	require.Contains(t, script, "exec postgres")
	require.Contains(t, s.Volumes, "pgstandby:/var/lib/postgresql/data", "its own volume, not the primary's")
	require.Equal(t, "service_healthy", s.DependsOn["postgres"].Condition)
	for _, p := range s.Ports {
		require.True(t, strings.HasPrefix(p, "127.0.0.1:"), "standby publishes %s beyond loopback", p)
	}
	_, standbyPort := hostPort(s.Ports, "5432")
	_, pgPort := hostPort(base["postgres"].Ports, "5432")
	require.NotEqual(t, pgPort, standbyPort)

	w := over["worker"]
	require.Equal(t, "service_healthy", w.DependsOn["postgres-standby"].Condition)
	read := w.Environment["CONSOLE_READ_DATABASE_URL"]
	require.Contains(t, read, "@postgres-standby:5432/inbox")
	// The console's own login (inbox_admin's), on the standby.
	require.Equal(t, strings.Replace(base["worker"].Environment["CONSOLE_DATABASE_URL"], "@postgres:", "@postgres-standby:", 1), read)

	mount := "./deploy/postgres/allow-replication.sh:/docker-entrypoint-initdb.d/allow-replication.sh:ro"
	require.Contains(t, over["postgres"].Volumes, mount)
	init, err := os.ReadFile("postgres/allow-replication.sh")
	require.NoError(t, err)
	require.Contains(t, string(init), `echo "host replication all all scram-sha-256" >>"$PGDATA/pg_hba.conf"`)
	fi, err := os.Stat("postgres/allow-replication.sh")
	require.NoError(t, err)
	require.NotZero(t, fi.Mode()&0o111, "the image runs *.sh init scripts it can execute (or sources them)")
}

// TestHealthcheckProbeBinaries runs the compose health checks' command,
// `ingest --probe URL` and `worker --probe URL`, with the real binaries: 0
// for a 200, 1 for a 503, without a database or any environment.
func TestHealthcheckProbeBinaries(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/readyz" {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	t.Cleanup(srv.Close)
	dir := t.TempDir()
	out, err := exec.Command("go", "build", "-o", dir+"/", "../cmd/ingest", "../cmd/worker").CombinedOutput()
	require.NoError(t, err, "go build:\n%s", out)
	for _, bin := range []string{"ingest", "worker"} {
		for path, want := range map[string]int{"/readyz": 0, "/unready": 1} {
			cmd := exec.Command(filepath.Join(dir, bin), "--probe", srv.URL+path)
			cmd.Env = []string{} // no DATABASE_URL, no config: the probe needs none
			out, err := cmd.CombinedOutput()
			code := 0
			var exit *exec.ExitError
			if errors.As(err, &exit) {
				code = exit.ExitCode()
			} else {
				require.NoError(t, err)
			}
			require.Equal(t, want, code, "%s --probe %s: %s", bin, path, out)
		}
	}
}
