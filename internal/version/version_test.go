package version

import (
	"runtime"
	"strings"
	"testing"
)

func TestVersionGet(t *testing.T) {
	t.Parallel()
	i := Get()
	if i.Version == "" || i.Revision == "" {
		t.Fatalf("empty field in %+v", i)
	}
	if i.GoVersion != runtime.Version() {
		t.Fatalf("GoVersion %q, want %q", i.GoVersion, runtime.Version())
	}
	s := i.String("worker")
	if !strings.HasPrefix(s, "worker "+i.Version+" ") || !strings.Contains(s, i.GoVersion) {
		t.Fatalf("String = %q", s)
	}
}
