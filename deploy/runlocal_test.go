package deploy_test

import (
	"os"
	"regexp"
	"testing"

	"github.com/stretchr/testify/require"
)

// The README's "look at what happened" shows the query that make run
// (scripts/run-local) prints, and the binaries make run builds, so a
// newcomer reads the same command in both places.
func TestReadmeShowsWhatMakeRunPrints(t *testing.T) {
	t.Parallel()
	script, err := os.ReadFile("../scripts/run-local")
	require.NoError(t, err)
	readme, err := os.ReadFile("../README.md")
	require.NoError(t, err)
	m := regexp.MustCompile(`then look at them: psql .+? -c '([^']+)'`).FindSubmatch(script)
	require.NotNil(t, m, "run-local prints a psql query to look at the envelopes")
	require.Contains(t, string(readme), `psql "$DATABASE_URL" -c '`+string(m[1])+`'`, "the README shows the query make run prints")
	require.Contains(t, string(script), "make -s build", "make run builds bin/ with the Makefile's flags")
	require.Regexp(t, "(?m)^bin/worker envelopes list", string(readme), "the README uses the binaries make run built")
	require.NotRegexp(t, "go run ./cmd/worker", string(readme), "not go run (it recompiles each time)")
}
