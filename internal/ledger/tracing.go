package ledger

import (
	"context"
	"errors"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// scope is the instrumentation scope of the ledger's spans, the module's
// (package tracing's Instrumentation; not imported: the ledger imports
// nothing of this module).
const scope = "github.com/inboxhq/inbox"

// tracedPost is post under a "ledger.post" span, a child of ctx's span
// (the handler's). A payment deferred to the batch's Flush is marked
// deferred: the "ledger.flush" span that writes it links back to this one.
// Attributes name the posting's kind, merchant and currency, never amounts.
func (w *Writer) tracedPost(ctx context.Context, envelopeID int64, p Posting) (Result, error) {
	ctx, span := trace.SpanFromContext(ctx).TracerProvider().Tracer(scope).Start(ctx, "ledger.post", trace.WithAttributes(
		attribute.Int64("inbox.envelope_id", envelopeID),
		attribute.String("ledger.kind", string(p.Kind)),
	))
	defer span.End()
	res, err := w.post(ctx, envelopeID, p)
	if err != nil {
		// Not the error's text: it may quote the payload's values.
		span.SetAttributes(attribute.Bool("ledger.payment_not_posted", errors.Is(err, ErrPaymentNotPosted)))
		span.SetStatus(codes.Error, "posting not written")
		return res, err
	}
	span.SetAttributes(
		attribute.Int64("ledger.transaction_id", res.TransactionID),
		attribute.Bool("ledger.created", res.Created),
		attribute.Bool("ledger.deferred", w.defers(p)),
	)
	return res, nil
}

// startFlushSpan starts the span of a Deferred's flush: one statement for
// many envelopes' payments, so it links to each posting's span (and thus
// to each envelope's trace) instead of having one parent.
func startFlushSpan(ctx context.Context, tp trace.TracerProvider, pending []deferredPosting) (context.Context, trace.Span) {
	links := make([]trace.Link, 0, len(pending))
	for _, q := range pending {
		if q.span.IsValid() {
			links = append(links, trace.Link{SpanContext: q.span, Attributes: []attribute.KeyValue{attribute.Int64("inbox.envelope_id", q.envelopeID)}})
		}
	}
	return tp.Tracer(scope).Start(ctx, "ledger.flush", trace.WithLinks(links...), trace.WithAttributes(attribute.Int("ledger.postings", len(pending))))
}
