package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestVersionEveryBinary runs each binary under cmd/ with --version: it
// prints "name version (revision R, goX)" and exits 0 without a database.
func TestVersionEveryBinary(t *testing.T) {
	t.Parallel()
	dirs, err := os.ReadDir("../cmd")
	require.NoError(t, err)
	head, _ := exec.Command("git", "rev-parse", "HEAD").Output()
	n := 0
	for _, d := range dirs {
		if !d.IsDir() {
			continue
		}
		n++
		name := d.Name()
		for _, flag := range []string{"--version", "-version"} {
			cmd := exec.Command(filepath.Join(binDir, name), flag)
			cmd.Env = []string{"PATH=" + os.Getenv("PATH")} // no DATABASE_URL, no config
			out, err := cmd.Output()
			require.NoError(t, err, "%s %s: %s", name, flag, out)
			line := strings.TrimSpace(string(out))
			m := regexp.MustCompile(`^` + name + ` (\S+) \(revision (\S+), (go\S+)\)$`).FindStringSubmatch(line)
			require.NotNil(t, m, "%s %s printed %q", name, flag, line)
			require.Equal(t, runtime.Version(), m[3], "built by this toolchain")
			if rev := m[2]; rev != "unknown" && len(head) > 0 {
				require.True(t, strings.HasPrefix(rev, strings.TrimSpace(string(head))), "revision %s is HEAD %s", rev, head)
			}
		}
	}
	require.GreaterOrEqual(t, n, 4, "ingest, worker, sendhook, inboxload")
}
