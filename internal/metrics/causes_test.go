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
	for _, pattern := range []string{"../../docs/*.md", deployDir + "/prometheus/rules/*.yml", deployDir + "/prometheus/tests/*.yml", deployDir + "/grafana/*.json", "../console/templates/*.html"} {
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

// causeMeanings are what prose says a waiting envelope waits for, and the
// one code the worker records for it: a sentence that ties the meaning to
// another code (issue 23: a refund waiting for its payment "shows as
// `not_ready`", a valid code of something else) fails.
var causeMeanings = []struct {
	said *regexp.Regexp
	code labels.Cause
}{
	{waitPattern("refund", "payment"), labels.CausePaymentNotPosted},
	{waitPattern("reversal", "refund"), labels.CauseRefundNotPosted},
}

// waitPattern matches a sentence saying a waiter waits for its target and
// naming a code for it: "... waits for its payment (`code`)" or "... shows
// as `code`"; the code is the last non-empty group.
func waitPattern(waiter, target string) *regexp.Regexp {
	return regexp.MustCompile("(?i)(?:" + waiter + "[^.`|]{0,60}(?:waits?|waiting) for its " + target + "|" + waiter + " before its " + target + ")" +
		"[^.`|)]{0,40}?(?:\\(`([a-z0-9_]+)`\\)|as `([a-z0-9_]+)`)")
}

// code is the code a waitPattern match names.
func code(m [][]byte) string {
	if len(m[2]) > 0 {
		return string(m[2])
	}
	return string(m[1])
}

// A code the docs name for a refund waiting for its payment (or a reversal
// for its refund) is that wait's own code.
func TestDocumentedWaitsNameTheirCause(t *testing.T) {
	t.Parallel()
	files := []string{"../../README.md"}
	for _, pattern := range []string{"../../docs/*.md", deployDir + "/prometheus/rules/*.yml", deployDir + "/grafana/*.json", "../console/templates/*.html"} {
		m, err := filepath.Glob(pattern)
		require.NoError(t, err)
		files = append(files, m...)
	}
	checked := 0
	for _, f := range files {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		for _, m := range causeMeanings {
			for _, hit := range m.said.FindAllSubmatch(b, -1) {
				checked++
				require.Equal(t, string(m.code), code(hit), "%s: %q names the wrong cause", f, hit[0])
			}
		}
	}
	require.Positive(t, checked, "the patterns find the sentences they check (docs/providers.md names one)")
	// The pattern does find what it checks.
	require.Equal(t, "not_ready", code(causeMeanings[0].said.FindSubmatch([]byte("a refund of a payment posted before then waits for its payment (`not_ready`)"))))
	require.Equal(t, "not_ready", code(causeMeanings[0].said.FindSubmatch([]byte("a refund waiting for its payment shows as `not_ready`"))))
	require.Equal(t, "x", code(causeMeanings[1].said.FindSubmatch([]byte("a reversal before its refund (`x`)"))))
	require.Nil(t, causeMeanings[0].said.FindSubmatch([]byte("a refund waiting for its payment (`refund_not_posted` a reversal waiting for its refund)")),
		"a code that begins another clause is not this wait's")
}
