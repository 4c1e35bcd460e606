// Package tracing owns the process's OpenTelemetry tracing: Setup from the
// standard OTEL_* environment (off unless an exporter is configured), the
// W3C trace context that an envelope keeps from its ingest request to its
// worker attempts, and Start, which costs nothing when tracing is off.
//
// It imports only OpenTelemetry; every other package may import it.
//
// Off (the default) means the global no-op provider and Enabled false: call
// sites check Enabled (or Span.IsRecording) before building attributes, so a
// delivery allocates nothing for tracing and nothing is logged per delivery.
package tracing

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// Instrumentation is the instrumentation scope of every span the inbox makes.
const Instrumentation = "github.com/inboxhq/inbox"

var (
	enabled atomic.Bool
	tracer  atomic.Pointer[trace.Tracer]
)

// Enabled reports whether spans are recorded. Hot paths check it before
// building a span's options, so tracing off costs one atomic load.
func Enabled() bool { return enabled.Load() }

// Propagator is the W3C trace context propagator (traceparent, tracestate).
var Propagator propagation.TextMapPropagator = propagation.TraceContext{}

// ErrUnsupported is wrapped by Setup's error for an OTEL_* value this
// build cannot honour (an exporter other than otlp, a protocol other than
// http/protobuf).
var ErrUnsupported = errors.New("unsupported OpenTelemetry setting")

// Setup configures tracing from the standard environment, read with getenv:
//
//   - OTEL_SDK_DISABLED=true, or OTEL_TRACES_EXPORTER=none: off.
//   - OTEL_TRACES_EXPORTER=otlp, or an OTEL_EXPORTER_OTLP_ENDPOINT /
//     OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: on, exporting OTLP over HTTP
//     (http/protobuf; the endpoints are read with getenv, the exporter's
//     other OTEL_EXPORTER_OTLP_* settings, headers, timeout, TLS and
//     compression, from the process environment).
//   - nothing of the above: off.
//
// OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES override serviceName and
// add resource attributes; OTEL_TRACES_SAMPLER(_ARG) choose the sampler
// (default parentbased_always_on, so a sender's sampled traceparent is kept).
//
// OpenTelemetry's own errors (a collector that refuses or cannot be
// reached) go to logger at WARN, at most one line a minute with the count
// of errors since the last: never a line per span or per delivery.
//
// The returned shutdown flushes the spans still buffered and must be called
// on exit (it is a no-op when tracing is off). Setup is meant to be called
// once per process.
func Setup(ctx context.Context, serviceName string, getenv func(string) string, logger *slog.Logger) (shutdown func(context.Context) error, err error) {
	noop := func(context.Context) error { return nil }
	if strings.EqualFold(strings.TrimSpace(getenv("OTEL_SDK_DISABLED")), "true") {
		return noop, nil
	}
	exporter := strings.ToLower(strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER")))
	switch exporter {
	case "none":
		return noop, nil
	case "":
		if getenv("OTEL_EXPORTER_OTLP_ENDPOINT") == "" && getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") == "" {
			return noop, nil
		}
	case "otlp":
	default:
		return nil, fmt.Errorf("OTEL_TRACES_EXPORTER=%q: %w (use otlp or none)", exporter, ErrUnsupported)
	}
	for _, k := range []string{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"} {
		if v := strings.TrimSpace(getenv(k)); v != "" {
			if v != "http/protobuf" {
				return nil, fmt.Errorf("%s=%q: %w (only http/protobuf is built in: point it at the collector's OTLP/HTTP port, 4318)", k, v, ErrUnsupported)
			}
			break // the more specific variable wins
		}
	}
	var opts []otlptracehttp.Option
	if u := strings.TrimSpace(getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")); u != "" {
		opts = append(opts, otlptracehttp.WithEndpointURL(u)) // as given, per the specification
	} else if u := strings.TrimSpace(getenv("OTEL_EXPORTER_OTLP_ENDPOINT")); u != "" {
		opts = append(opts, otlptracehttp.WithEndpointURL(strings.TrimRight(u, "/")+"/v1/traces"))
	}
	exp, err := otlptracehttp.New(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("otlp trace exporter: %w", err)
	}
	res, err := resource.New(ctx,
		resource.WithAttributes(attribute.String("service.name", serviceName)),
		resource.WithFromEnv(), // OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES win
		resource.WithTelemetrySDK(),
	)
	if err != nil && res == nil {
		return nil, fmt.Errorf("trace resource: %w", err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	otel.SetErrorHandler(&errorLog{logger: logger, every: time.Minute})
	Use(tp)
	return func(ctx context.Context) error {
		enabled.Store(false)
		return tp.Shutdown(ctx)
	}, nil
}

// Use installs tp as the process's tracer provider (and the W3C propagator)
// and turns tracing on. Setup calls it; tests call it with a provider over
// an in-memory exporter (go.opentelemetry.io/otel/sdk/trace/tracetest).
func Use(tp trace.TracerProvider) {
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(Propagator)
	t := tp.Tracer(Instrumentation)
	tracer.Store(&t)
	enabled.Store(true)
}

// Tracer returns the inbox's tracer (the no-op one while tracing is off).
func Tracer() trace.Tracer {
	if t := tracer.Load(); t != nil {
		return *t
	}
	return otel.Tracer(Instrumentation)
}

// Start starts a span named name as a child of ctx's span. Callers on a
// hot path check Enabled first: building opts allocates even when the span
// is not recorded.
func Start(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	return Tracer().Start(ctx, name, opts...)
}

// carrier is a propagation.TextMapCarrier holding one traceparent.
type carrier struct{ traceparent string }

func (c *carrier) Get(key string) string {
	if key == "traceparent" {
		return c.traceparent
	}
	return ""
}

func (c *carrier) Set(key, value string) {
	if key == "traceparent" {
		c.traceparent = value
	}
}

func (c *carrier) Keys() []string { return []string{"traceparent"} }

// TraceParent returns the W3C traceparent of ctx's span ("00-<trace id>-<span
// id>-<flags>"), or "" when ctx has no valid span context (tracing off, or a
// request that carried none and started none). It is what an envelope keeps.
func TraceParent(ctx context.Context) string {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return ""
	}
	var c carrier
	Propagator.Inject(ctx, &c)
	return c.traceparent
}

// SpanContext parses a stored traceparent into a remote span context; a
// blank or malformed one gives an invalid span context (no parent, no link).
func SpanContext(traceparent string) trace.SpanContext {
	if traceparent == "" {
		return trace.SpanContext{}
	}
	return trace.SpanContextFromContext(Propagator.Extract(context.Background(), &carrier{traceparent: traceparent}))
}

// WithRemoteParent returns ctx with traceparent's span context as its
// remote parent, so the next Start joins that trace; ctx unchanged when the
// traceparent is blank or malformed.
func WithRemoteParent(ctx context.Context, traceparent string) context.Context {
	sc := SpanContext(traceparent)
	if !sc.IsValid() {
		return ctx
	}
	return trace.ContextWithRemoteSpanContext(ctx, sc)
}

// Flush calls shutdown (Setup's) with a bound of 5 s, so spans still
// buffered are exported on exit, and logs a failure once (an unreachable
// collector must not keep the process from exiting).
func Flush(shutdown func(context.Context) error, logger *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := shutdown(ctx); err != nil {
		logger.Warn("tracing: spans not flushed on exit", "error", err)
	}
}

// errorLog is OpenTelemetry's error handler: a WARN line at most every
// "every", counting the errors it did not log.
type errorLog struct {
	logger  *slog.Logger
	every   time.Duration
	mu      sync.Mutex
	last    time.Time
	dropped int
}

func (e *errorLog) Handle(err error) {
	e.mu.Lock()
	now := time.Now()
	if !e.last.IsZero() && now.Sub(e.last) < e.every {
		e.dropped++
		e.mu.Unlock()
		return
	}
	dropped := e.dropped
	e.last, e.dropped = now, 0
	e.mu.Unlock()
	e.logger.Warn("tracing: spans not exported", "error", err, "errors_not_logged", dropped)
}
