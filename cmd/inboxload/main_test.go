package main

import (
	"bytes"
	"context"
	"testing"

	"github.com/stretchr/testify/require"
)

// -h says how to use it and succeeds (issue 23: it exited 1 with
// `unknown command "-h"`); an unknown command is still an error.
func TestHelpSucceeds(t *testing.T) {
	t.Parallel()
	for _, arg := range []string{"-h", "--help", "help"} {
		var out bytes.Buffer
		require.NoError(t, run(context.Background(), []string{arg}, func(string) string { return "" }, &out, &out), arg)
		require.Contains(t, out.String(), "usage: inboxload send|drain|rss")
	}
	var out bytes.Buffer
	require.ErrorContains(t, run(context.Background(), []string{"sned"}, func(string) string { return "" }, &out, &out), `unknown command "sned"`)
}
