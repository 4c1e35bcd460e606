package admin

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/inboxhq/inbox/internal/tracing"
)

// startReplaySpan starts the span of one replay command. The replayed
// attempts do not become its children: each envelope keeps its ingest
// request's trace context, so its new attempt joins that trace; this span
// links to each of them instead (linkReplayed). Its attributes are the
// replay's batch id (envelope_replay.batch_id) and counts; not the actor,
// the reason or the filter, which are in envelope_replay.
func startReplaySpan(ctx context.Context, batchID string, matched int) (context.Context, trace.Span) {
	return tracing.Start(ctx, "admin.replay", trace.WithAttributes(
		attribute.String("inbox.replay_batch_id", batchID),
		attribute.Int("inbox.matched", matched),
	))
}

// linkReplayed links span to the traces of the envelopes a committed
// batch replayed (those stored with tracing on). The SDK keeps the first
// 128 links of a span (OTEL_SPAN_LINK_COUNT_LIMIT).
func linkReplayed(span trace.Span, ids []int64, traces map[int64]string) {
	for _, id := range ids {
		if sc := tracing.SpanContext(traces[id]); sc.IsValid() {
			span.AddLink(trace.Link{SpanContext: sc, Attributes: []attribute.KeyValue{attribute.Int64("inbox.envelope_id", id)}})
		}
	}
}

// endReplaySpan ends a replay's span with its result.
func endReplaySpan(span trace.Span, res *ReplayResult) {
	span.SetAttributes(attribute.Int("inbox.replayed", res.Replayed), attribute.Int("inbox.skipped", res.Skipped),
		attribute.Int("inbox.batches", res.Batches), attribute.Bool("inbox.interrupted", res.Interrupted))
	if res.Interrupted {
		span.SetStatus(codes.Error, "interrupted")
	}
	span.End()
}
