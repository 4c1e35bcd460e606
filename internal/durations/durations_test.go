package durations_test

import (
	"flag"
	"io"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/inboxhq/inbox/internal/durations"
)

func TestParse(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]time.Duration{
		"90s":    90 * time.Second,
		"15m":    15 * time.Minute,
		"36h":    36 * time.Hour,
		"7d":     7 * 24 * time.Hour,
		"1d12h":  36 * time.Hour,
		"2d30m":  48*time.Hour + 30*time.Minute,
		" 30d ":  720 * time.Hour,
		"0":      0,
		"1h0m0s": time.Hour,
	} {
		got, err := durations.Parse(in)
		require.NoError(t, err, in)
		require.Equal(t, want, got, in)
	}
	for _, bad := range []string{"", "7", "d", "7dd", "1d-5h", "1d+5h", "7 days", "100001d", "1w"} {
		_, err := durations.Parse(bad)
		require.Error(t, err, bad)
		require.Contains(t, err.Error(), "duration", bad)
	}
}

func TestFormatRoundTrips(t *testing.T) {
	t.Parallel()
	for d, want := range map[time.Duration]string{
		0:                               "0s",
		20 * time.Millisecond:           "20ms",
		90 * time.Second:                "1m30s",
		time.Minute:                     "1m",
		time.Hour:                       "1h",
		2*time.Hour + 30*time.Minute:    "2h30m",
		720 * time.Hour:                 "30d",
		36 * time.Hour:                  "1d12h",
		24*time.Hour + time.Second:      "1d1s",
		-36 * time.Hour:                 "-1d12h",
		1500 * time.Microsecond:         "1.5ms",
		3*24*time.Hour + 90*time.Minute: "3d1h30m",
	} {
		require.Equal(t, want, durations.Format(d), d.String())
		if d >= 0 {
			back, err := durations.Parse(want)
			require.NoError(t, err, want)
			require.Equal(t, d, back, want)
		}
	}
}

func TestValueIsAFlag(t *testing.T) {
	t.Parallel()
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	v := durations.Value(720 * time.Hour)
	fs.Var(&v, "body-after", "")
	require.Equal(t, "30d", fs.Lookup("body-after").DefValue)
	require.NoError(t, fs.Parse([]string{"--body-after", "7d"}))
	require.Equal(t, durations.Value(7*24*time.Hour), v)
	err := fs.Parse([]string{"--body-after", "soon"})
	require.ErrorContains(t, err, `invalid value "soon" for flag -body-after`)
	require.ErrorContains(t, err, "not a duration")
}
