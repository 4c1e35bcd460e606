package metrics_test

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/inboxhq/inbox/internal/labels"
)

// causeUse finds a cause code where the docs, runbooks, alert rules and the
// dashboard select by one: a metric label (cause="x"), SQL (cause = 'x',
// last_cause = 'x'), a flag (--cause x) or a console link (cause=x).
var causeUse = regexp.MustCompile(`(?:\bcause\s*=\s*["']|\bcause\s*=\s*|--cause[ =])([a-z0-9_]+)`)

// causePlaceholders are what prose writes where a code goes.
var causePlaceholders = []string{"x", "n", "cause", "code"}

// Every cause code the operator's material names is one the code writes
// (labels.Causes): a runbook that says a snooze shows as a code the worker
// never records (issue 23: "not_ready" for a refund waiting for its payment)
// sends the on-call engineer looking for nothing.
func TestDocumentedCausesAreWritten(t *testing.T) {
	t.Parallel()
	files := []string{"../../README.md"}
	for _, pattern := range []string{"../../docs/*.md", deployDir + "/prometheus/rules/*.yml", deployDir + "/prometheus/tests/*.yml", deployDir + "/grafana/*.json"} {
		m, err := filepath.Glob(pattern)
		require.NoError(t, err)
		files = append(files, m...)
	}
	known := map[string]bool{}
	for _, c := range labels.Causes {
		known[string(c)] = true
	}
	found := 0
	for _, f := range files {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		for _, m := range causeUse.FindAllSubmatch(b, -1) {
			code := string(m[1])
			if slices.Contains(causePlaceholders, code) {
				continue
			}
			found++
			require.True(t, known[code], "%s names the cause %q (%q), which the code never writes (internal/labels/cause.go)", f, code, m[0])
		}
	}
	require.GreaterOrEqual(t, found, 8, "the pattern finds the causes the docs name")
}
