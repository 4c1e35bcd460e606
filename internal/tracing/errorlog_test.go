package tracing

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// TestErrorLogIsRateLimited: a collector that is down makes every batch
// export fail; the log gets one line per interval, counting the rest.
func TestErrorLogIsRateLimited(t *testing.T) {
	var buf bytes.Buffer
	e := &errorLog{logger: slog.New(slog.NewTextHandler(&buf, nil)), every: time.Hour}
	for range 3 {
		e.Handle(errors.New("connection refused"))
	}
	if n := strings.Count(buf.String(), "spans not exported"); n != 1 {
		t.Fatalf("%d lines for 3 errors within the interval, want 1:\n%s", n, buf.String())
	}
	e.last = e.last.Add(-2 * time.Hour) // the interval passed
	e.Handle(errors.New("connection refused"))
	if n := strings.Count(buf.String(), "spans not exported"); n != 2 || !strings.Contains(buf.String(), "errors_not_logged=2") {
		t.Fatalf("want a second line counting 2 unlogged errors:\n%s", buf.String())
	}
}
