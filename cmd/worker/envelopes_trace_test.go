package main

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/inboxhq/inbox/internal/envelope"
)

// TestEnvelopesShowTrace: show names the trace an envelope's request
// started (its traceparent), so an operator can find it in the tracing
// backend; an envelope stored with tracing off shows no trace line.
func TestEnvelopesShowTrace(t *testing.T) {
	t.Parallel()
	b := admSetup(t)
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	res, err := b.store.Insert(context.Background(), envelope.NewDelivery{Source: "gh", Provider: "github", DeliveryID: "deliv-traced",
		EventType: "push", Body: []byte(`{}`), Headers: map[string]string{}, TraceContext: tp})
	require.NoError(t, err)
	out, _, err := b.run(t, "envelopes", "show", admItoa(res.EnvelopeID))
	require.NoError(t, err)
	require.Regexp(t, `(?m)^trace\s+`+tp+`$`, out)
	out, _, err = b.run(t, "envelopes", "show", "--json", admItoa(res.EnvelopeID))
	require.NoError(t, err)
	require.Contains(t, out, `"trace_context": "`+tp+`"`)

	untraced := b.insert(t, "gh", "deliv-untraced", []byte(`{}`))
	out, _, err = b.run(t, "envelopes", "show", admItoa(untraced))
	require.NoError(t, err)
	require.NotRegexp(t, `(?m)^trace\s`, out)
}
