package ledger_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/inboxhq/inbox/internal/ledger"
)

// TestPostAndFlushSpans: under a recording span (its provider, not a
// global one), Post is a child "ledger.post" span, and the Flush that
// writes several envelopes' deferred payments is one "ledger.flush" span
// linked to each of their posting spans, each in its own trace.
func TestPostAndFlushSpans(t *testing.T) {
	t.Parallel()
	b := setup(t)
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	envs := []int64{b.envelope(t), b.envelope(t)}
	err := pgx.BeginFunc(b.ctx, b.pool, func(tx pgx.Tx) error {
		d := ledger.NewDeferred(tx)
		for i, env := range envs {
			// One trace per envelope, as the worker's attempts are.
			ctx, attempt := tp.Tracer("test").Start(context.Background(), "envelope.process")
			_, err := ledger.NewWriter(tx, ledger.NewAccounts(b.pool), d).Post(ctx, env, payment("pay_tr"+string(rune('a'+i)), "m_tr", "EUR", 100))
			require.NoError(t, err)
			attempt.End()
		}
		return d.Flush(b.ctx) // the batch's context: no span of its own
	})
	require.NoError(t, err)

	var posts, flushes []tracetest.SpanStub
	parents := map[string]tracetest.SpanStub{}
	for _, s := range exp.GetSpans() {
		switch s.Name {
		case "ledger.post":
			posts = append(posts, s)
		case "ledger.flush":
			flushes = append(flushes, s)
		case "envelope.process":
			parents[s.SpanContext.SpanID().String()] = s
		}
	}
	require.Len(t, posts, 2)
	require.Len(t, flushes, 1)
	require.Len(t, flushes[0].Links, 2, "the flush links to both postings")
	for i, p := range posts {
		require.Contains(t, parents, p.Parent.SpanID().String(), "a post is its attempt's child")
		require.Equal(t, p.SpanContext, flushes[0].Links[i].SpanContext)
		for _, kv := range p.Attributes {
			require.NotContains(t, []string{"ledger.amount_minor", "ledger.idempotency_key"}, string(kv.Key))
		}
	}
	require.NotEqual(t, posts[0].SpanContext.TraceID(), posts[1].SpanContext.TraceID())
}
