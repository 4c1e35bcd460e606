// Package metrics defines the Prometheus metrics of ingest and worker. Label
// values come only from configuration and fixed sets (sources, outcomes,
// statuses), never from a request, so an attacker cannot grow them. It
// imports nothing of this module.
package metrics

import (
	"context"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// UnknownSource is the source label of requests to a source that is not
// configured (the path segment itself is never a label).
const UnknownSource = "unknown"

// Ingest holds ingest's metrics.
type Ingest struct {
	Requests          *prometheus.CounterVec
	SignatureFailures *prometheus.CounterVec
	Duplicates        *prometheus.CounterVec
	Conflicts         *prometheus.CounterVec
	Duration          *prometheus.HistogramVec
}

// NewIngest registers ingest's metrics on reg.
func NewIngest(reg prometheus.Registerer) *Ingest {
	m := &Ingest{
		Requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "inbox_ingest_requests_total",
			Help: "Webhook requests by source and outcome (accepted, duplicate, conflict, bad_signature, bad_request, too_large, read_timeout, unknown_source, unavailable, overloaded, db_permission, internal_error).",
		}, []string{"source", "outcome"}),
		SignatureFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "inbox_ingest_signature_failures_total",
			Help: "Rejected signatures by source and reason.",
		}, []string{"source", "reason"}),
		Duplicates: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "inbox_ingest_duplicates_total",
			Help: "Deliveries whose id was already stored with the same body (provider retries).",
		}, []string{"source"}),
		Conflicts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "inbox_ingest_conflicts_total",
			Help: "Deliveries that reused a stored delivery id with a different body (answered 200 duplicate; the variant is in envelope_conflict).",
		}, []string{"source"}),
		Duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "inbox_ingest_request_duration_seconds",
			Help:    "Time from request start to response, by source and outcome.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5},
		}, []string{"source", "outcome"}),
	}
	reg.MustRegister(m.Requests, m.SignatureFailures, m.Duplicates, m.Conflicts, m.Duration)
	return m
}

// Init creates the zero series of each configured source, so dashboards and
// alerts see 0 rather than nothing before the first event.
func (m *Ingest) Init(sources []string) {
	for _, s := range sources {
		m.Duplicates.WithLabelValues(s)
		m.Conflicts.WithLabelValues(s)
		m.Requests.WithLabelValues(s, "accepted")
	}
}

// Observe records one webhook request.
func (m *Ingest) Observe(source, outcome, signatureReason string, elapsed time.Duration) {
	m.Requests.WithLabelValues(source, outcome).Inc()
	m.Duration.WithLabelValues(source, outcome).Observe(elapsed.Seconds())
	switch outcome {
	case "duplicate":
		m.Duplicates.WithLabelValues(source).Inc()
	case "conflict":
		m.Conflicts.WithLabelValues(source).Inc()
	case "bad_signature":
		m.SignatureFailures.WithLabelValues(source, signatureReason).Inc()
	}
}

// Worker holds the worker's metrics.
type Worker struct {
	Attempts          *prometheus.CounterVec
	Snoozes           *prometheus.CounterVec
	ProcessingLatency *prometheus.HistogramVec
	LedgerPostings    *prometheus.CounterVec
}

// NewWorker registers the worker's metrics on reg. With a non-nil pool it
// also exports envelope counts by status and the oldest pending age, read
// from the database at most every 30 s. The read counts the envelope table:
// cheap at thousands of rows, seconds at tens of millions; it is bounded at
// 3 s, and inbox_envelope_stats_up says when it failed.
func NewWorker(reg prometheus.Registerer, pool *pgxpool.Pool, logger *slog.Logger) *Worker {
	m := &Worker{
		Attempts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "inbox_worker_attempts_total",
			Help: "Processing attempts by source and outcome (done, ignored, failed, retry, snoozed).",
		}, []string{"source", "outcome"}),
		Snoozes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "inbox_worker_snoozes_total",
			Help: "Attempts that snoozed (not ready, downstream Retry-After, throttled), by source and cause.",
		}, []string{"source", "cause"}),
		ProcessingLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "inbox_processing_latency_seconds",
			Help:    "Time from receipt to a final status, by source and status.",
			Buckets: []float64{.01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600, 21600, 86400},
		}, []string{"source", "status"}),
		LedgerPostings: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "inbox_ledger_postings_total",
			Help: "Ledger transactions by kind and result (posted, or skipped as already posted).",
		}, []string{"kind", "result"}),
	}
	reg.MustRegister(m.Attempts, m.Snoozes, m.ProcessingLatency, m.LedgerPostings)
	if pool != nil {
		reg.MustRegister(&envelopeCollector{pool: pool, logger: logger})
	}
	return m
}

// WorkerOutcomes and SnoozeCauses are the label values Init creates zero
// series for; they are every value the worker records.
var (
	WorkerOutcomes = []string{"done", "ignored", "failed", "retry", "snoozed"}
	SnoozeCauses   = []string{"not_ready", "retry_after", "throttled"}
)

// Init creates the zero series of each configured source, so an alert on
// failed attempts or a dashboard of snoozes sees 0 rather than nothing
// before the first one.
func (m *Worker) Init(sources []string) {
	for _, s := range sources {
		for _, o := range WorkerOutcomes {
			m.Attempts.WithLabelValues(s, o)
		}
		for _, c := range SnoozeCauses {
			m.Snoozes.WithLabelValues(s, c)
		}
	}
}

// envelopeCollector reads envelope counts from the database, caching them
// for 30 s so frequent scrapes do not load it.
type envelopeCollector struct {
	pool   *pgxpool.Pool
	logger *slog.Logger

	mu      sync.Mutex
	at      time.Time
	counts  []statusCount
	oldest  float64
	scrapes error
}

type statusCount struct {
	source, status string
	n              float64
}

var (
	envelopesDesc = prometheus.NewDesc("inbox_envelopes", "Envelopes by source and status.", []string{"source", "status"}, nil)
	oldestDesc    = prometheus.NewDesc("inbox_oldest_pending_age_seconds", "Age of the oldest pending envelope (0 when none).", nil, nil)
	upDesc        = prometheus.NewDesc("inbox_envelope_stats_up", "1 if the last read of envelope statistics succeeded.", nil, nil)
)

func (c *envelopeCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- envelopesDesc
	ch <- oldestDesc
	ch <- upDesc
}

func (c *envelopeCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if time.Since(c.at) > 30*time.Second {
		c.refresh()
	}
	up := 1.0
	if c.scrapes != nil {
		up = 0
	}
	ch <- prometheus.MustNewConstMetric(upDesc, prometheus.GaugeValue, up)
	for _, sc := range c.counts {
		ch <- prometheus.MustNewConstMetric(envelopesDesc, prometheus.GaugeValue, sc.n, sc.source, sc.status)
	}
	ch <- prometheus.MustNewConstMetric(oldestDesc, prometheus.GaugeValue, c.oldest)
}

func (c *envelopeCollector) refresh() {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	c.scrapes = nil
	rows, err := c.pool.Query(ctx, `SELECT source, status, count(*) FROM envelope GROUP BY 1, 2`)
	if err == nil {
		var counts []statusCount
		for rows.Next() {
			var sc statusCount
			if err = rows.Scan(&sc.source, &sc.status, &sc.n); err != nil {
				break
			}
			counts = append(counts, sc)
		}
		rows.Close()
		if err == nil {
			err = rows.Err()
		}
		if err == nil {
			c.counts = withZeros(counts)
		}
	}
	if err == nil {
		err = c.pool.QueryRow(ctx, `SELECT coalesce(extract(epoch FROM now() - min(received_at)), 0)::float8 FROM envelope WHERE status = 'pending'`).Scan(&c.oldest)
	}
	if err != nil {
		c.scrapes = err
		c.logger.Warn("read envelope statistics", "error", err)
	}
	c.at = time.Now()
}

// statuses are the envelope statuses, each exported per source even at 0,
// so a status that empties does not vanish from dashboards and alerts.
var statuses = []string{"pending", "done", "failed", "ignored"}

func withZeros(counts []statusCount) []statusCount {
	seen := map[string]map[string]bool{}
	var sources []string
	for _, sc := range counts {
		if seen[sc.source] == nil {
			seen[sc.source] = map[string]bool{}
			sources = append(sources, sc.source)
		}
		seen[sc.source][sc.status] = true
	}
	for _, src := range sources {
		for _, st := range statuses {
			if !seen[src][st] {
				counts = append(counts, statusCount{source: src, status: st})
			}
		}
	}
	return counts
}

// NewRegistry returns a registry with the Go runtime and process collectors.
func NewRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

// Handler serves reg in the Prometheus text format.
func Handler(reg *prometheus.Registry) http.Handler {
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg})
}

// AdminMux returns the admin listener's routes: /metrics, /healthz (process
// up) and /readyz (ready reports nil, e.g. the database answers).
func AdminMux(reg *prometheus.Registry, ready func(context.Context) error) *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", Handler(reg))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"status":"ok"}` + "\n"))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		w.Header().Set("Content-Type", "application/json")
		if err := ready(ctx); err != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte(`{"status":"unavailable","error":"database unreachable"}` + "\n"))
			return
		}
		_, _ = w.Write([]byte(`{"status":"ready"}` + "\n"))
	})
	return mux
}
