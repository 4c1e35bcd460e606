package cli_test

import (
	"bytes"
	"errors"
	"flag"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/inboxhq/inbox/internal/cli"
)

func newFlags(env map[string]string) (*cli.Flags, *bytes.Buffer, *time.Duration) {
	var out bytes.Buffer
	fs := cli.NewFlags("worker purge", func(k string) string { return env[k] }, &out)
	d := fs.Duration("body-after", "WORKER_PURGE_BODY_AFTER", 30*24*time.Hour, "drop bodies older than this")
	return fs, &out, d
}

func TestDurationFlagsReadDaysAndShowThem(t *testing.T) {
	t.Parallel()
	fs, _, d := newFlags(nil)
	require.NoError(t, fs.Parse([]string{"--body-after", "7d"}))
	require.Equal(t, 7*24*time.Hour, *d)

	fs, _, d = newFlags(map[string]string{"WORKER_PURGE_BODY_AFTER": "1d12h"})
	require.NoError(t, fs.Parse(nil))
	require.Equal(t, 36*time.Hour, *d, "from the environment")

	fs, out, _ := newFlags(nil)
	require.ErrorIs(t, fs.Parse([]string{"-h"}), flag.ErrHelp)
	require.Contains(t, out.String(), "Usage of worker purge:")
	require.Contains(t, out.String(), "-body-after duration\n")
	require.Contains(t, out.String(), "(env WORKER_PURGE_BODY_AFTER) (default 30d)")
}

func TestBadFlagIsOneUsageErrorLine(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"--nope"}, {"--body-after", "30 days"}} {
		fs, out, _ := newFlags(nil)
		err := fs.Parse(args)
		var u cli.UsageError
		require.True(t, errors.As(err, &u), "%v: %T", args, err)
		require.Contains(t, err.Error(), "(see 'worker purge -h')")
		require.Empty(t, out.String(), "the caller prints the error once; no usage dump")
	}
	fs, _, _ := newFlags(map[string]string{"WORKER_PURGE_BODY_AFTER": "soon"})
	err := fs.Parse(nil)
	require.True(t, errors.As(err, new(cli.UsageError)))
	require.EqualError(t, err, `WORKER_PURGE_BODY_AFTER: "soon" is not a duration (e.g. 30s, 15m, 24h, 7d)`)
}

// A float flag reads its environment variable, a flag given overrides it,
// and a value that is not a number is one usage error naming the variable.
func TestFloatFlagFromTheEnvironment(t *testing.T) {
	t.Parallel()
	parse := func(env map[string]string, args ...string) (float64, error) {
		fs := cli.NewFlags("ingest", func(k string) string { return env[k] }, new(bytes.Buffer))
		f := fs.Float("pressure-surge", "INGEST_PRESSURE_SURGE", 1.5, "ratio")
		err := fs.Parse(args)
		return *f, err
	}
	v, err := parse(nil)
	require.NoError(t, err)
	require.Equal(t, 1.5, v, "the default")
	v, err = parse(map[string]string{"INGEST_PRESSURE_SURGE": "2.25"})
	require.NoError(t, err)
	require.Equal(t, 2.25, v, "from the environment")
	v, err = parse(map[string]string{"INGEST_PRESSURE_SURGE": "2.25"}, "--pressure-surge", "-1")
	require.NoError(t, err)
	require.Equal(t, -1.0, v, "the flag over the environment")
	_, err = parse(map[string]string{"INGEST_PRESSURE_SURGE": "lots"})
	require.True(t, errors.As(err, new(cli.UsageError)))
	require.EqualError(t, err, `INGEST_PRESSURE_SURGE: "lots" is not a number`)
}
