package ingest

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/inboxhq/inbox/internal/envelope"
	"github.com/inboxhq/inbox/internal/labels"
	"github.com/inboxhq/inbox/internal/provider"
	"github.com/inboxhq/inbox/internal/tracing"
)

// Options tune the server; zero values take the defaults.
type Options struct {
	// StoreTimeout is the store deadline: a delivery is answered within it
	// of its request's arrival (headers read), whatever the database does.
	// Waiting for body memory, the pool, the insert, the enqueue and the
	// COMMIT all count; past it the answer is 503 with Retry-After, even
	// with a COMMIT in flight (the retry of a delivery that did commit is
	// answered 200 duplicate). Default 3 s: under Shopify's 5 s, the
	// shortest provider timeout (README).
	StoreTimeout time.Duration
	// ShedAfter refuses deliveries at once (503, Retry-After, reason
	// store_behind) while the oldest delivery being stored has waited longer
	// than this: the database is stalled or saturated, and a new delivery
	// would only wait behind it for its deadline. Default
	// DefaultShedAfter (at most StoreTimeout/3); negative: never.
	ShedAfter time.Duration
	// ShedAfterOverload is the shorter store queue age past which
	// deliveries are refused once ingest is over capacity: from a refusal
	// (the queue reached ShedAfter) until a second passes with none. More
	// is offered than the database commits, and the queue would otherwise
	// sit at ShedAfter, every accepted delivery waiting that long; it sits
	// near this instead. A blip under ShedAfter refuses nothing, as before.
	// Default DefaultShedAfterOverload, or twice PressureTarget or a
	// quarter of ShedAfter when more (at most ShedAfter); negative, or with
	// ShedAfter negative: never (ShedAfter alone).
	ShedAfterOverload time.Duration
	// PressureTarget: while the store queue age stands above it for
	// PressureInterval, ingest notifies envelope.PressureChannel every interval
	// (RunPressure) and workers yield the database to it. Default
	// DefaultPressureTarget; negative: never.
	PressureTarget time.Duration
	// PressureInterval: see PressureTarget. Default
	// DefaultPressureInterval.
	PressureInterval time.Duration
	// PressureSurge: under pressure, an offered rate over this many times
	// the calm one (the rate offered lately without pressure) is a surge,
	// and the notification says so (envelope.PressureSurge): workers then
	// yield at once, even those keeping up. Default DefaultPressureSurge;
	// negative: never (workers yield only once behind, or while ingest
	// refuses deliveries).
	PressureSurge float64
	// RetryAfter is the Retry-After of a 503. Default 5 s.
	RetryAfter time.Duration
	// Now is the clock for signature timestamps. Default time.Now.
	Now func() time.Time
	// Observe, when set, is called once per webhook request with the source
	// (labels.UnknownSourceName for a source not configured),
	// the outcome (accepted, duplicate, bad_signature, ...), the signature
	// failure's reason when there is one, and the time taken.
	Observe func(source string, outcome labels.IngestOutcome, reason string, elapsed time.Duration)
	// MaxInflightBodyBytes bounds the request bodies held in memory at once
	// across all requests, beyond FreeBodyBytes each. Default 64 MiB.
	MaxInflightBodyBytes int64
	// BodyWait is how long a request waits for body memory before it is
	// answered 503 with Retry-After. Default 500 ms.
	BodyWait time.Duration
}

// Server is the ingest HTTP handler.
type Server struct {
	sources           map[string]Source
	store             *envelope.Store
	logger            *slog.Logger
	now               func() time.Time
	storeTimeout      time.Duration
	shed              *shedder
	retryAfterSeconds int
	refusals          lineLimiter
	observeFunc       func(source string, outcome labels.IngestOutcome, reason string, elapsed time.Duration)
	router            chi.Router
	bodies            *bodyBudget
}

// InflightBodyBytes returns the bytes of request bodies held in memory now.
func (s *Server) InflightBodyBytes() int64 { return s.bodies.inflight.Load() }

// New builds the server for sources, keyed by the name each is served at
// (POST /webhooks/<name>). ingestconfig.Sources builds them from the
// sources file. It refuses a source without a provider, a verifier or a
// positive body limit.
func New(sources map[string]Source, store *envelope.Store, logger *slog.Logger, opts Options) (*Server, error) {
	s := &Server{
		sources:     make(map[string]Source, len(sources)),
		store:       store,
		logger:      logger,
		now:         opts.Now,
		observeFunc: opts.Observe,
		bodies:      newBodyBudget(opts.MaxInflightBodyBytes, opts.BodyWait),
	}
	if s.now == nil {
		s.now = time.Now
	}
	opts = opts.WithDefaults()
	s.storeTimeout = opts.StoreTimeout
	s.shed = newShedder(opts.ShedAfter, opts.PressureTarget, opts.PressureInterval, opts.ShedAfterOverload, opts.PressureSurge)
	s.retryAfterSeconds = int(opts.RetryAfter / time.Second)
	if s.retryAfterSeconds <= 0 {
		s.retryAfterSeconds = 5
	}
	for name, src := range sources {
		if err := src.check(); err != nil {
			return nil, fmt.Errorf("source %q: %w", name, err)
		}
		s.sources[name] = src
	}

	r := chi.NewRouter()
	r.Use(requestID, closeChunked)
	r.Use(s.recoverer)
	r.Post("/webhooks/{source}", s.handleWebhook)
	r.Get("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	r.Get("/readyz", s.handleReady)
	r.NotFound(func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusNotFound, errorBody{Error: "not found", Status: "not_found"})
	})
	r.MethodNotAllowed(s.methodNotAllowed)
	s.router = r
	return s, nil
}

// WithDefaults returns o with the store deadline, the shed and pressure
// limits resolved as New applies them (zero: the default), so that a
// caller checking them against one another checks what runs.
func (o Options) WithDefaults() Options {
	if o.StoreTimeout <= 0 {
		o.StoreTimeout = DefaultStoreTimeout
	}
	if o.ShedAfter == 0 {
		o.ShedAfter = min(DefaultShedAfter, o.StoreTimeout/3)
	}
	o.PressureTarget = cmp.Or(o.PressureTarget, DefaultPressureTarget)
	if o.PressureInterval <= 0 {
		o.PressureInterval = DefaultPressureInterval
	}
	o.PressureSurge = cmp.Or(o.PressureSurge, DefaultPressureSurge)
	if o.ShedAfterOverload == 0 {
		// Scaled with the limits an operator raised for a slower store.
		o.ShedAfterOverload = max(DefaultShedAfterOverload, 2*o.PressureTarget, o.ShedAfter/4)
	}
	o.ShedAfterOverload = min(o.ShedAfterOverload, o.ShedAfter) // never longer once refusing
	if o.ShedAfter <= 0 {
		o.ShedAfterOverload = -1 // nothing refused for the queue's age
	}
	return o
}

// DefaultStoreTimeout is the default store deadline (Options.StoreTimeout).
const DefaultStoreTimeout = 3 * time.Second

// DefaultShedAfter is the default store queue age past which deliveries are
// refused at once (Options.ShedAfter): 5-25x a commit's time while the
// database keeps up, so only a stall or a saturated database reaches it.
// Chosen by measurement (docs/benchmarks.md, "Overload"): at twice the
// sustainable rate, 1 s let latency reach 5 s and left requests unanswered,
// 250 ms kept the p99 under 0.5-1 s with every request answered.
const DefaultShedAfter = 250 * time.Millisecond

// DefaultShedAfterOverload is the default of Options.ShedAfterOverload:
// twice the default pressure target, the queue age workers are asked to
// hold ingest's store at. Measured (docs/benchmarks.md, "Holding the queue
// short once refusing"): with ingest's store at its capacity and about
// 1.5x that offered, accepted deliveries' p99 from due was 292-314 ms
// against 547-716 ms with --shed-after alone.
const DefaultShedAfterOverload = 70 * time.Millisecond

// ShedAfter returns the store queue age past which deliveries are refused
// at once (negative: never).
func (s *Server) ShedAfter() time.Duration { return s.shed.after }

// ShedAfterOverload returns the store queue age past which deliveries are
// refused while ingest is over capacity (negative: never).
func (s *Server) ShedAfterOverload() time.Duration { return s.shed.overload }

// ShedLimit returns the store queue age past which a delivery arriving now
// is refused: ShedAfter, or ShedAfterOverload within a second of the last
// refusal (negative: never).
func (s *Server) ShedLimit() time.Duration { return s.shed.limit(time.Now()) }

// OverloadHolds returns how many holds of ShedAfterOverload began: a
// delivery refused for the store queue's age while none was in force.
func (s *Server) OverloadHolds() int64 { return s.shed.holds.Load() }

// PressureSurges returns how many surges began: the first pressure check
// that found one (Options.PressureSurge), or the first after a second of
// checks that found none.
func (s *Server) PressureSurges() int64 { return s.shed.surges.Load() }

// PressureTarget returns the store queue age that, standing for the
// pressure interval, makes ingest ask workers to yield (Options.PressureTarget
// with its default; negative: never).
func (s *Server) PressureTarget() time.Duration { return s.shed.target }

// Refuse returns the handler of requests on connections past the
// listener's cap (cli.Limits.Overflow): each is answered 503 with
// Retry-After at once, reason connections, and counted under its source.
func (s *Server) Refuse() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		label := labels.UnknownSourceName
		if name, ok := strings.CutPrefix(r.URL.Path, "/webhooks/"); ok {
			if _, known := s.sources[name]; known {
				label = name
			}
		}
		r = r.WithContext(withStart(r.Context(), label, time.Now()))
		s.writeError(w, r, errTooManyConns, s.logger.With("source", label))
	})
}

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.router.ServeHTTP(w, r) }

type acceptedBody struct {
	EnvelopeID int64  `json:"envelope_id"`
	Status     string `json:"status"`
}

func (s *Server) handleWebhook(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	name := chi.URLParam(r, "source")
	log := s.requestLogger(r, name)
	src, ok := s.sources[name]
	label := name
	if !ok {
		label = labels.UnknownSourceName // never a label value taken from the request
	}
	ctx := withStart(r.Context(), label, start)
	if tracing.Enabled() {
		var span trace.Span
		ctx, span = startRequestSpan(ctx, r, label)
		defer span.End()
	}
	r = r.WithContext(ctx)
	if !ok {
		s.writeError(w, r, errUnknownSource, log)
		return
	}
	limit := src.MaxBodyBytes
	if r.ContentLength > limit {
		s.writeError(w, r, errTooLarge, log)
		return
	}
	if s.shed.refuse(s.store.QueueAge(), start) {
		s.writeError(w, r, errStoreBehind, log)
		return
	}
	// The deadline counts from the request's arrival: every wait below
	// (body memory, pool, commit) spends it.
	ctx, cancel := context.WithDeadline(r.Context(), start.Add(s.storeTimeout))
	defer cancel()
	body, release, err := s.bodies.read(ctx, w, r, limit)
	defer release()
	if err != nil {
		var tooLarge *http.MaxBytesError
		if !errors.As(err, &tooLarge) && !errors.Is(err, errOverloaded) {
			err = &readError{err}
		}
		s.writeError(w, r, err, log)
		return
	}
	d, err := src.Verifier.Verify(r.Header, body, s.now())
	if err != nil {
		s.writeError(w, r, err, log)
		return
	}

	var storeSpan trace.Span
	if tracing.Enabled() {
		ctx, storeSpan = tracing.Start(ctx, "envelope.store", trace.WithAttributes(attribute.String("inbox.source", name)))
	}
	res, err := s.store.Insert(ctx, envelope.NewDelivery{
		Source:      name,
		Provider:    src.Provider,
		DeliveryID:  d.DeliveryID,
		EventType:   d.EventType,
		Body:        body,
		Payload:     d.Payload,
		Headers:     d.Headers,
		SignedAt:    d.SignedAt,
		MaxAttempts: src.MaxAttempts,
		// Set when the signature does not cover the delivery id.
		ReplayDigest: replayDigest(src, d),
		ReplayWindow: src.ReplayWindow,
		// The request's span, not the store's: attempts are its children.
		TraceContext: tracing.TraceParent(r.Context()),
	})
	if storeSpan != nil {
		endStoreSpan(storeSpan, res, err)
	}
	if err != nil {
		s.writeError(w, r, err, log.With("delivery_id", d.DeliveryID, "event_type", d.EventType, "envelope_id", res.EnvelopeID))
		return
	}
	code, outcome, status := http.StatusAccepted, labels.Accepted, labels.Accepted
	switch {
	case res.ReplayOf != "":
		// A captured signed body resent under a new delivery id (the
		// signature does not cover the id): answered as the duplicate it
		// is, recorded, and said to the operator.
		code, outcome, status = http.StatusOK, labels.Replay, labels.Duplicate
		log.WarnContext(r.Context(), "signed body replayed under a new delivery id: acknowledged as a duplicate, nothing stored, recorded in envelope_duplicate",
			"delivery_id", d.DeliveryID, "replay_of", res.ReplayOf, "event_type", d.EventType, "envelope_id", res.EnvelopeID)
	case res.Duplicate:
		code, outcome, status = http.StatusOK, labels.Duplicate, labels.Duplicate
	}
	// DEBUG: at full rate an INFO line per delivery cost 13% of ingest's
	// throughput (docs/benchmarks.md), and the envelope row is the record.
	if log.Enabled(r.Context(), slog.LevelDebug) {
		log.Debug("delivery stored", "delivery_id", d.DeliveryID, "event_type", d.EventType, "envelope_id", res.EnvelopeID,
			"outcome", outcome, "status", code, "duration_ms", float64(time.Since(start).Microseconds())/1000)
	}
	s.observe(r, outcome, "")
	traceResult(r, code, string(outcome), res.EnvelopeID)
	writeJSON(w, code, acceptedBody{EnvelopeID: res.EnvelopeID, Status: string(status)})
}

func (s *Server) handleReady(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	if err := s.store.Pool().Ping(ctx); err != nil {
		w.Header().Set("Retry-After", strconv.Itoa(s.retryAfterSeconds))
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "unavailable", "error": "database unreachable"})
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
}

// recoverer answers a panic with 500 and logs it with the request id.
func (s *Server) recoverer(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if v := recover(); v != nil {
				if v == http.ErrAbortHandler {
					panic(v)
				}
				s.logger.Error("panic serving request", "request_id", middleware.GetReqID(r.Context()), "panic", v)
				writeJSON(w, http.StatusInternalServerError, errorBody{Error: "internal error", Status: "internal_error", RequestID: middleware.GetReqID(r.Context())})
			}
		}()
		next.ServeHTTP(w, r)
	})
}

type startKey struct{}

type startInfo struct {
	source string
	at     time.Time
}

func withStart(ctx context.Context, source string, at time.Time) context.Context {
	return context.WithValue(ctx, startKey{}, startInfo{source, at})
}

func (s *Server) observe(r *http.Request, outcome labels.IngestOutcome, reason string) {
	if s.observeFunc == nil {
		return
	}
	si, _ := r.Context().Value(startKey{}).(startInfo)
	s.observeFunc(si.source, outcome, reason, time.Since(si.at))
}

// replayDigest is d's replay digest when its source checks replays.
func replayDigest(src Source, d provider.Delivery) []byte {
	if !src.CheckReplays {
		return nil
	}
	return d.ReplayDigest
}
