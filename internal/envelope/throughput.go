package envelope

import (
	"context"
	"fmt"
	"time"

	"github.com/inboxhq/inbox/internal/pg"
)

// Throughput is how the envelopes received since a time were processed:
// what a load run measures once the inbox has drained.
type Throughput struct {
	Envelopes, Pending, Failed int64
	// Seconds is the first processed_at to the last.
	Seconds float64
	// LatencyP50ms, LatencyP99ms and LatencyMaxms are received_at to
	// processed_at, in milliseconds, over the processed envelopes.
	LatencyP50ms, LatencyP99ms, LatencyMaxms float64
	// LastReceived and LastProcessed are the latest received_at and
	// processed_at; nil when there is none.
	LastReceived, LastProcessed *time.Time
}

// MeasureThroughput reads Throughput of the envelopes received at or after
// since (zero: every envelope) in one scan of them.
func MeasureThroughput(ctx context.Context, q pg.Querier, since time.Time) (Throughput, error) {
	var r Throughput
	err := q.QueryRow(ctx, `
		SELECT count(*),
		       count(*) FILTER (WHERE status = $2),
		       count(*) FILTER (WHERE status = $3),
		       coalesce(extract(epoch FROM max(processed_at) - min(processed_at)), 0)::float8,
		       coalesce(1000 * extract(epoch FROM percentile_cont(0.5) WITHIN GROUP (ORDER BY processed_at - received_at)), 0)::float8,
		       coalesce(1000 * extract(epoch FROM percentile_cont(0.99) WITHIN GROUP (ORDER BY processed_at - received_at)), 0)::float8,
		       coalesce(1000 * extract(epoch FROM max(processed_at - received_at)), 0)::float8,
		       max(received_at), max(processed_at)
		  FROM envelope WHERE received_at >= $1`, since, StatusPending, StatusFailed).Scan(
		&r.Envelopes, &r.Pending, &r.Failed, &r.Seconds, &r.LatencyP50ms, &r.LatencyP99ms, &r.LatencyMaxms, &r.LastReceived, &r.LastProcessed)
	if err != nil {
		return Throughput{}, fmt.Errorf("measure throughput: %w", err)
	}
	return r, nil
}
