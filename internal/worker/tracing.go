package worker

import (
	"context"
	"encoding/json"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/inboxhq/inbox/internal/handlers"
	"github.com/inboxhq/inbox/internal/tracing"
)

// startAttemptSpan starts the span of one envelope's run in a batch
// transaction. Its parent is the envelope's stored trace context (the
// ingest request, a remote parent), so every attempt, replays included,
// joins the request's trace; an envelope stored with tracing off starts a
// trace of its own. The span ends with the transaction (endAttemptSpans):
// a run that is rolled back (a batch run again with savepoints, one by
// one) ends "rolled back", and the next run has a span of its own.
func startAttemptSpan(ctx context.Context, a *attempt, savepoints bool) (context.Context, trace.Span) {
	env := a.env
	ctx = tracing.WithRemoteParent(ctx, env.TraceContext)
	return tracing.Start(ctx, "envelope.process",
		trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(
			attribute.Int64("inbox.envelope_id", env.ID),
			attribute.String("inbox.source", env.Source),
			attribute.String("inbox.provider", env.Provider),
			attribute.String("inbox.event_type", env.EventType),
			attribute.Int64("inbox.job_id", a.job.ID),
			attribute.Int("inbox.attempt", a.job.Attempt),
			attribute.Bool("inbox.replayed", env.LastReplayedAt != nil),
			attribute.Bool("inbox.savepoints", savepoints),
		))
}

// endAttemptSpans ends the spans of a transaction's attempts with their
// outcome, or as rolled back when the transaction failed (err).
func endAttemptSpans(atts []*attempt, err error) {
	for _, a := range atts {
		if a.span == nil {
			continue
		}
		// Only an attempt that reached try has a span: it commits with
		// the transaction.
		committed := err == nil
		a.span.SetAttributes(attribute.Bool("inbox.committed", committed))
		if a.dec.label != "" {
			a.span.SetAttributes(attribute.String("inbox.outcome", a.dec.label))
		}
		switch {
		case !committed:
			a.span.SetStatus(codes.Error, "rolled back")
		case a.dec.final:
			a.span.SetStatus(codes.Error, string(a.dec.outcome))
		}
		a.span.End()
		a.span = nil
	}
}

// runTracedHandler runs h under a "handler" span (when tracing is on). The
// span records whether the handler failed, not its error's text: a
// handler's error may quote the payload.
func runTracedHandler(ctx context.Context, h handlers.Handler, run handlers.Run) (json.RawMessage, error) {
	if !trace.SpanFromContext(ctx).IsRecording() {
		return h.Handle(ctx, run)
	}
	ctx, span := tracing.Start(ctx, "handler", trace.WithAttributes(attribute.String("inbox.event_type", run.Envelope.EventType)))
	defer span.End()
	res, err := h.Handle(ctx, run)
	if err != nil {
		span.SetStatus(codes.Error, "handler error")
	}
	return res, err
}
