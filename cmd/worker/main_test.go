package main

import (
	"bytes"
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/inboxhq/inbox/internal/pg"
	"github.com/inboxhq/inbox/internal/pgtest"
)

func runCmd(args ...string) (stdout, stderr string, err error) {
	var o, e bytes.Buffer
	err = run(context.Background(), args, func(string) string { return "" }, &o, &e)
	return o.String(), e.String(), err
}

// A bare worker lists the commands and exits 2 rather than start processing;
// -h lists them on stdout; an unknown command or flag is a usage error.
func TestCommandLine(t *testing.T) {
	t.Parallel()
	out, errOut, err := runCmd()
	require.ErrorContains(t, err, "no command given")
	require.Equal(t, 2, exitCode(err))
	require.Empty(t, out)
	require.Contains(t, errOut, "envelopes show ID")

	for _, h := range []string{"-h", "--help", "help"} {
		out, _, err = runCmd(h)
		require.NoError(t, err, h)
		for _, cmd := range []string{"run ", "migrate ", "replay ", "envelopes list", "stats ", "purge "} {
			require.Contains(t, out, "\n  "+cmd, "%s lists %q", h, cmd)
		}
	}

	_, _, err = runCmd("frobnicate")
	require.ErrorContains(t, err, `unknown command "frobnicate"`)
	require.Equal(t, 2, exitCode(err))

	out, errOut, err = runCmd("run", "--nope")
	require.EqualError(t, err, "flag provided but not defined: -nope (see 'worker run -h')")
	require.Equal(t, 2, exitCode(err))
	require.Empty(t, out+errOut, "the error is printed once, by cli.Main")
}

// Pointed at a database without the inbox's tables, every command says so
// and what to do, instead of "relation does not exist".
func TestWrongDatabaseSaysWhatToDo(t *testing.T) {
	t.Parallel()
	url := pgtest.EmptyURL(t)
	env := func(k string) string {
		if k == "DATABASE_URL" {
			return url
		}
		return ""
	}
	for _, args := range [][]string{{"stats"}, {"envelopes", "list"}} {
		var o, e bytes.Buffer
		err := run(context.Background(), args, env, &o, &e)
		require.ErrorIs(t, err, pg.ErrNoSchema, "%v", args)
		require.ErrorContains(t, err, "worker migrate")
		require.Equal(t, 1, exitCode(err))
	}
}
