package ingest

import (
	"context"
	"net/http"

	"github.com/go-chi/chi/v5/middleware"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/inboxhq/inbox/internal/envelope"
	"github.com/inboxhq/inbox/internal/tracing"
)

// startRequestSpan starts the server span of one webhook request, a child
// of the sender's traceparent when it sent one. Its attributes name the
// source (the configured name, or "unknown"), never the body, a header's
// value or anything signed.
func startRequestSpan(ctx context.Context, r *http.Request, source string) (context.Context, trace.Span) {
	ctx = tracing.Propagator.Extract(ctx, propagation.HeaderCarrier(r.Header))
	return tracing.Start(ctx, "POST /webhooks/{source}",
		trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(
			attribute.String("http.request.method", r.Method),
			attribute.String("http.route", "/webhooks/{source}"),
			attribute.String("inbox.source", source),
			attribute.String("inbox.request_id", middleware.GetReqID(r.Context())),
		))
}

// traceResult records a webhook request's answer on its span (when
// tracing is on): status, outcome, and the envelope when there is one.
func traceResult(r *http.Request, code int, outcome string, envelopeID int64) {
	span := trace.SpanFromContext(r.Context())
	if !span.IsRecording() {
		return
	}
	span.SetAttributes(attribute.Int("http.response.status_code", code), attribute.String("inbox.outcome", outcome))
	if envelopeID != 0 {
		span.SetAttributes(attribute.Int64("inbox.envelope_id", envelopeID))
	}
	if code >= http.StatusInternalServerError {
		span.SetStatus(codes.Error, outcome)
	}
}

// endStoreSpan ends the span of a store step (group commit: the wait for a
// transaction and its COMMIT).
func endStoreSpan(span trace.Span, res envelope.InsertResult, err error) {
	span.SetAttributes(attribute.Int64("inbox.envelope_id", res.EnvelopeID), attribute.Bool("inbox.duplicate", res.Duplicate))
	if err != nil {
		span.SetStatus(codes.Error, "store failed")
	}
	span.End()
}
