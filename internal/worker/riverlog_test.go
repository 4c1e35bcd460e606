package worker

import (
	"bytes"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"
)

// River's periodic job counts go to debug; its other lines keep their level.
func TestRiverLoggerDemotesJobCounts(t *testing.T) {
	for _, level := range []slog.Level{slog.LevelInfo, slog.LevelDebug} {
		var buf bytes.Buffer
		l := riverLogger(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: level}))).With("component", "river")
		l.Info("producer: Producer job counts", "num_jobs_running", 3)
		l.Info("River client started", "client_id", "w1")
		l.Warn("producer: Producer job counts") // only info is demoted
		out := buf.String()
		require.Contains(t, out, `level=INFO msg="River client started" component=river client_id=w1`)
		require.Contains(t, out, `level=WARN msg="producer: Producer job counts"`)
		if level == slog.LevelInfo {
			require.NotContains(t, out, "num_jobs_running", "at info the counts are not shown")
		} else {
			require.Contains(t, out, `level=DEBUG msg="producer: Producer job counts" component=river num_jobs_running=3`)
		}
	}
}
