package worker

import (
	"math"
	"runtime/debug"
	"testing"

	"github.com/stretchr/testify/require"
)

// Not parallel: it changes process-wide settings, and restores them.
func TestTuneGCKeepsTheOperatorsSettings(t *testing.T) {
	prevPercent := debug.SetGCPercent(100)
	prevLimit := debug.SetMemoryLimit(math.MaxInt64)
	t.Cleanup(func() {
		debug.SetGCPercent(prevPercent)
		debug.SetMemoryLimit(prevLimit)
	})

	TuneGC(func(string) string { return "" })
	require.Equal(t, DefaultGCPercent, debug.SetGCPercent(100))
	require.Equal(t, int64(DefaultMemoryLimit), debug.SetMemoryLimit(math.MaxInt64))

	set := map[string]string{"GOGC": "150", "GOMEMLIMIT": "1GiB"}
	TuneGC(func(k string) string { return set[k] })
	require.Equal(t, 100, debug.SetGCPercent(100), "GOGC set: left as the runtime read it")
	require.Equal(t, int64(math.MaxInt64), debug.SetMemoryLimit(math.MaxInt64), "GOMEMLIMIT set: left alone")
}
