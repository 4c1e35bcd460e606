package pgtest

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// Tool finds the external program name a test needs (promtool, kustomize,
// stripe-mock, ...): on PATH, else in GOBIN or GOPATH/bin, where
// scripts/ensure-tools' go install puts it. Missing, the test is skipped
// with hint, or fails under CI (InCI), where scripts/ensure-tools installs
// it before the tests run.
func Tool(t testing.TB, name, hint string) string {
	t.Helper()
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	if out, err := exec.Command("go", "env", "GOBIN", "GOPATH").Output(); err == nil {
		gobin, gopath, _ := strings.Cut(string(out), "\n")
		for _, dir := range []string{strings.TrimSpace(gobin), filepath.Join(strings.TrimSpace(gopath), "bin")} {
			if dir == "" || dir == "bin" {
				continue
			}
			p := filepath.Join(dir, name)
			if fi, err := os.Stat(p); err == nil && !fi.IsDir() {
				return p
			}
		}
	}
	if InCI() {
		t.Fatalf("%s not found (CI): scripts/ensure-tools installs it before make test", name)
	}
	t.Skipf("%s not found: %s", name, hint)
	return ""
}
