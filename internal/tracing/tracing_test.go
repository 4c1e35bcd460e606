package tracing_test

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/inboxhq/inbox/internal/tracing"
)

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

// TestSetupOffByDefault: with no exporter or endpoint configured (or with
// tracing disabled), Setup installs nothing and tracing stays off. None of
// these cases turns tracing on, so this package's tests may share the
// process-wide state.
func TestSetupOffByDefault(t *testing.T) {
	for name, e := range map[string]map[string]string{
		"nothing":              {},
		"exporter none":        {"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"},
		"sdk disabled":         {"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "otlp"},
		"only a service name":  {"OTEL_SERVICE_NAME": "inbox"},
		"only a sampler":       {"OTEL_TRACES_SAMPLER": "always_on"},
		"sdk disabled (upper)": {"OTEL_SDK_DISABLED": "TRUE", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4318/v1/traces"},
	} {
		t.Run(name, func(t *testing.T) {
			shutdown, err := tracing.Setup(context.Background(), "test", env(e), slog.Default())
			require.NoError(t, err)
			require.False(t, tracing.Enabled())
			require.NoError(t, shutdown(context.Background()))
		})
	}
}

// TestSetupRefusesWhatItCannotHonour: an exporter or protocol this build
// does not have is a startup error naming the variable, not silence.
func TestSetupRefusesWhatItCannotHonour(t *testing.T) {
	for name, e := range map[string]map[string]string{
		"zipkin exporter": {"OTEL_TRACES_EXPORTER": "zipkin"},
		"grpc protocol":   {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4317", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"},
		"traces protocol": {"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/json", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := tracing.Setup(context.Background(), "test", env(e), slog.Default())
			require.True(t, errors.Is(err, tracing.ErrUnsupported), "%v", err)
			require.False(t, tracing.Enabled())
		})
	}
}

// TestOffCostsNoAllocations: the hot paths' pattern (check Enabled, or
// IsRecording on the context's span) allocates nothing when tracing is off.
func TestOffCostsNoAllocations(t *testing.T) {
	require.False(t, tracing.Enabled())
	ctx := context.Background()
	allocs := testing.AllocsPerRun(1000, func() {
		if tracing.Enabled() {
			var span trace.Span
			_, span = tracing.Start(ctx, "x", trace.WithAttributes(attribute.Int64("inbox.envelope_id", 1)))
			span.End()
		}
		if span := trace.SpanFromContext(ctx); span.IsRecording() {
			span.SetAttributes(attribute.String("inbox.outcome", "done"))
		}
		_ = tracing.TraceParent(ctx)
		_ = tracing.WithRemoteParent(ctx, "")
	})
	require.Zero(t, allocs)
}

func TestTraceParentRoundTrip(t *testing.T) {
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	sc := tracing.SpanContext(tp)
	require.True(t, sc.IsValid())
	require.True(t, sc.IsRemote())
	require.True(t, sc.IsSampled())
	require.Equal(t, tp, tracing.TraceParent(trace.ContextWithSpanContext(context.Background(), sc)))
	for _, bad := range []string{"", "garbage", "00-00000000000000000000000000000000-00f067aa0ba902b7-01", "00-4bf92f3577b34da6a3ce929d0e0e4736-zz-01"} {
		require.False(t, tracing.SpanContext(bad).IsValid(), bad)
		ctx := context.Background()
		require.Equal(t, ctx, tracing.WithRemoteParent(ctx, bad), bad)
	}
}

// TestSetupExportsOnShutdown: with an endpoint configured, spans are
// exported over OTLP/HTTP to <endpoint>/v1/traces, and shutdown flushes
// what is still buffered. It turns tracing on, then off again: it is the
// last test of this package and is not parallel.
func TestSetupExportsOnShutdown(t *testing.T) {
	var got atomic.Int32
	var path atomic.Value
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		path.Store(r.URL.Path)
		got.Add(1)
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.WriteHeader(http.StatusOK)
	}))
	defer collector.Close()
	shutdown, err := tracing.Setup(context.Background(), "inbox-test", env(map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": collector.URL + "/"}), slog.Default())
	require.NoError(t, err)
	require.True(t, tracing.Enabled())
	_, span := tracing.Start(context.Background(), "x")
	span.End()
	require.NoError(t, shutdown(context.Background()))
	require.False(t, tracing.Enabled())
	require.Equal(t, int32(1), got.Load(), "shutdown flushed the span")
	require.Equal(t, "/v1/traces", path.Load())
}
