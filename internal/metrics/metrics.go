// Package metrics defines the Prometheus metrics of ingest and worker. Label
// values come only from configuration and fixed sets (sources, outcomes,
// statuses), never from a request, so an attacker cannot grow them. Of this
// module it imports internal/version (for inbox_build_info) and the packages
// that define the label values it pre-creates: labels, envelope (outcomes and
// statuses; its store also reads the envelope counts and the oldest pending
// envelope: metrics writes no SQL on envelope tables) and ledger (posting
// kinds).
package metrics

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/inboxhq/inbox/internal/envelope"
	"github.com/inboxhq/inbox/internal/labels"
	"github.com/inboxhq/inbox/internal/ledger"
	"github.com/inboxhq/inbox/internal/version"
)

// Ingest holds ingest's metrics.
type Ingest struct {
	Requests          *prometheus.CounterVec
	SignatureFailures *prometheus.CounterVec
	Duplicates        *prometheus.CounterVec
	Conflicts         *prometheus.CounterVec
	Duration          *prometheus.HistogramVec
	// ConflictsNotStored counts conflicting deliveries whose body was not
	// stored again: a variant already recorded (kept="repeat"), or one past
	// the per-envelope cap (kept="overflow").
	ConflictsNotStored *prometheus.CounterVec
	// ConnectionsEvicted counts connections closed without a request in
	// progress to make room at --max-conns (cli.ListenLimited).
	ConnectionsEvicted prometheus.Counter
	// Refused counts deliveries refused at once (outcome overloaded) by the
	// resource ingest was short of (labels.RefusalReasons).
	Refused *prometheus.CounterVec
	// StorePressure is 1 while the store queue stands above
	// --pressure-target and workers are asked to yield the database.
	StorePressure prometheus.Gauge
}

// SetStorePressure sets StorePressure.
func (m *Ingest) SetStorePressure(on bool) {
	v := 0.0
	if on {
		v = 1
	}
	m.StorePressure.Set(v)
}

// NewIngest registers ingest's metrics on reg.
func NewIngest(reg prometheus.Registerer) *Ingest {
	m := &Ingest{
		Requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "inbox_ingest_requests_total",
			Help: "Webhook requests by source and outcome (accepted, duplicate, conflict, replay, bad_signature, bad_request, too_large, read_timeout, unknown_source, unavailable, overloaded, db_permission, internal_error).",
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
		ConflictsNotStored: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "inbox_ingest_conflict_bodies_not_stored_total",
			Help: "Conflicting deliveries whose body was not stored: a variant already recorded for the envelope (kept=repeat) or one past the per-envelope cap of distinct variants (kept=overflow); each is counted on its envelope_conflict row.",
		}, []string{"source", "kept"}),
		ConnectionsEvicted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "inbox_ingest_connections_evicted_total",
			Help: "Connections without a request in progress (idle keep-alive, or open and silent) closed to make room for a new one at --max-conns.",
		}),
		Refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "inbox_ingest_refused_total",
			Help: "Deliveries refused at once with 503 and Retry-After (outcome overloaded), by the resource short: body_memory (--max-inflight-body-bytes), store_behind (the store queue older than inbox_ingest_shed_limit_seconds: --shed-after, or --shed-after-overload while refusing), connections (--max-conns all taken, none idle 250 ms to close for room).",
		}, []string{"reason"}),
		StorePressure: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "inbox_ingest_store_pressure",
			Help: "1 while the store queue age has stood above --pressure-target for --pressure-interval: ingest notifies inbox_ingest_pressure and workers yield the database (inbox_worker_yield_limit); nothing is refused for it.",
		}),
		Duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "inbox_ingest_request_duration_seconds",
			Help:    "Time from request start to response, by source and outcome.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5},
		}, []string{"source", "outcome"}),
	}
	reg.MustRegister(m.Requests, m.SignatureFailures, m.Duplicates, m.Conflicts, m.ConflictsNotStored, m.Duration, m.ConnectionsEvicted, m.Refused, m.StorePressure)
	for _, r := range labels.RefusalReasons {
		m.Refused.WithLabelValues(string(r))
	}
	return m
}

// SignatureNoMatch is the provider verifiers' reason for a well-formed
// signature that no configured secret produced (a wrong or rotated secret),
// the one reason Init creates a zero series of; other reasons appear when
// they first happen.
const SignatureNoMatch = "no signature matches"

// postingResults are labels.PostingResults as label values.
func postingResults() []string {
	out := make([]string, len(labels.PostingResults))
	for i, r := range labels.PostingResults {
		out[i] = string(r)
	}
	return out
}

// Init creates the zero series of each configured source (every outcome) and
// of the unknown source's unknown_source, so dashboards and alerts (503s,
// signature failures, conflicts) see 0 rather than nothing before the first
// event. The duration histogram gets the accepted series only.
func (m *Ingest) Init(sources []string) {
	for _, s := range sources {
		m.Duplicates.WithLabelValues(s)
		m.Conflicts.WithLabelValues(s)
		m.ConflictsNotStored.WithLabelValues(s, string(envelope.ConflictRepeat))
		m.ConflictsNotStored.WithLabelValues(s, string(envelope.ConflictOverflow))
		m.SignatureFailures.WithLabelValues(s, SignatureNoMatch)
		for _, o := range labels.IngestOutcomes {
			m.Requests.WithLabelValues(s, string(o))
		}
		m.Duration.WithLabelValues(s, string(labels.Accepted))
	}
	m.Requests.WithLabelValues(labels.UnknownSourceName, string(labels.UnknownSource))
}

// RegisterInflightBodyBytes exports inbox_ingest_inflight_body_bytes, read
// from bytes at each scrape. Call it once.
func (m *Ingest) RegisterInflightBodyBytes(reg prometheus.Registerer, bytes func() int64) {
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "inbox_ingest_inflight_body_bytes",
		Help: "Bytes of request bodies held in memory now (bounded by --max-inflight-body-bytes plus 16 KiB per connection).",
	}, func() float64 { return float64(bytes()) }))
}

// StoreQueue is what RegisterStoreQueue reads of ingest's store queue.
type StoreQueue struct {
	// Age is how long the oldest delivery being stored has waited, and
	// Limit the age past which a delivery arriving now is refused, read
	// at each scrape.
	Age, Limit func() time.Duration
	// Holds is how many holds of the shorter limit began (Server.OverloadHolds).
	Holds func() int64
	// Surges is how many surges began (Server.PressureSurges).
	Surges func() int64
	// ShedAfter and Overload are the two limits Limit is one of, and
	// PressureTarget the age that, standing, asks workers to yield
	// (negative: never).
	ShedAfter, Overload, PressureTarget time.Duration
}

// RegisterStoreQueue exports inbox_ingest_store_queue_age_seconds,
// inbox_ingest_shed_limit_seconds (the limit in force now), the two limits
// it is one of (inbox_ingest_shed_after_seconds and
// inbox_ingest_shed_after_overload_seconds; 0: never),
// inbox_ingest_overload_holds_total, inbox_ingest_pressure_surges_total,
// and inbox_ingest_pressure_target_seconds (0: never). Call it once.
func (m *Ingest) RegisterStoreQueue(reg prometheus.Registerer, q StoreQueue) {
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "inbox_ingest_store_queue_age_seconds",
		Help: "How long the oldest delivery being stored has waited (0 when none): a few commit times while the database keeps up.",
	}, func() float64 { return q.Age().Seconds() }))
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "inbox_ingest_shed_after_seconds",
		Help: "The store queue age past which new deliveries are refused at once with 503 (--shed-after; 0: never).",
	})
	g.Set(max(0, q.ShedAfter.Seconds()))
	ov := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "inbox_ingest_shed_after_overload_seconds",
		Help: "The shorter store queue age past which deliveries are refused from a refusal until a second passes with none (--shed-after-overload; 0: never).",
	})
	ov.Set(max(0, q.Overload.Seconds()))
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "inbox_ingest_shed_limit_seconds",
		Help: "The store queue age past which a delivery arriving now is refused: --shed-after, or --shed-after-overload while a hold lasts (0: never).",
	}, func() float64 { return max(0, q.Limit().Seconds()) }))
	reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "inbox_ingest_overload_holds_total",
		Help: "Holds of --shed-after-overload begun: a delivery refused for the store queue's age while none was in force (over capacity, or the store stalled). A hold lasts until a second passes with none refused; a steady rate of them with no overload (the store queue mostly short) means the store's healthy queue passes --shed-after-overload now and then.",
	}, func() float64 { return float64(q.Holds()) }))
	reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "inbox_ingest_pressure_surges_total",
		Help: "Surges begun: a pressure check finding the rate offered over --pressure-surge times the calm one, after one that did not. Workers then drop to their floor at once, even those keeping up; a surge lasts until a check finds no pressure.",
	}, func() float64 { return float64(q.Surges()) }))
	pt := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "inbox_ingest_pressure_target_seconds",
		Help: "The store queue age that, standing for --pressure-interval, makes ingest ask workers to yield the database (--pressure-target; 0: never).",
	})
	pt.Set(max(0, q.PressureTarget.Seconds()))
	reg.MustRegister(g, ov, pt)
}

// Observe records one webhook request. reason is the signature's failure
// reason for bad_signature, how a conflict was kept for conflict
// (envelope.ConflictKept), the labels.RefusalReason for overloaded, else "".
func (m *Ingest) Observe(source string, outcome labels.IngestOutcome, reason string, elapsed time.Duration) {
	m.Requests.WithLabelValues(source, string(outcome)).Inc()
	m.Duration.WithLabelValues(source, string(outcome)).Observe(elapsed.Seconds())
	switch outcome {
	case labels.Duplicate:
		m.Duplicates.WithLabelValues(source).Inc()
	case labels.Conflict:
		m.Conflicts.WithLabelValues(source).Inc()
		if kept := envelope.ConflictKept(reason); kept == envelope.ConflictRepeat || kept == envelope.ConflictOverflow {
			m.ConflictsNotStored.WithLabelValues(source, reason).Inc()
		}
	case labels.BadSignature:
		m.SignatureFailures.WithLabelValues(source, reason).Inc()
	case labels.Overloaded:
		m.Refused.WithLabelValues(reason).Inc()
	}
}

// Worker holds the worker's metrics.
type Worker struct {
	Attempts *prometheus.CounterVec
	Snoozes  *prometheus.CounterVec
	// Failures counts attempts that did not succeed by source, cause
	// (FailureCauses) and outcome (FailureOutcomes).
	Failures          *prometheus.CounterVec
	ProcessingLatency *prometheus.HistogramVec
	LedgerPostings    *prometheus.CounterVec
	// Heartbeat is when the running worker last reached its database
	// (Unix seconds); RunHeartbeat sets it.
	Heartbeat prometheus.Gauge
	// YieldLimit is the envelope rate this worker holds itself to while
	// ingest reports store pressure (0: not yielding).
	YieldLimit prometheus.Gauge
	// YieldBehind counts batches that did not yield, while yielding,
	// because processing was already --yield-max-lag behind.
	YieldBehind prometheus.Counter
	// YieldWithheld counts the seconds this worker kept its limit past
	// the usual release because its last lift was futile and the load
	// had not eased (worker.Yield.Withheld).
	YieldWithheld prometheus.Counter
	// Unprocessed counts the jobs that ran and processed nothing, by
	// source and reason (labels.UnprocessedReasons).
	Unprocessed *prometheus.CounterVec

	river     *riverCollector    // nil without a pool
	envelopes *envelopeCollector // nil without a pool
}

// Processing kinds, the kind label of inbox_processing_latency_seconds: the
// first processing of an envelope is timed from its receipt, a replay's from
// the replay (so a replayed week-old envelope is not a week-long latency).
const (
	KindFirst  = "first"
	KindReplay = "replay"
)

// NewWorker registers the worker's metrics on reg. With a non-nil pool it
// also exports envelope counts by status and the oldest pending age, read
// from the database at most every 30 s. The read counts the envelope table:
// cheap at thousands of rows, seconds at tens of millions; it is bounded at
// 3 s, and inbox_envelope_stats_up says when it failed. River's job counts
// (inbox_river_jobs) are read the same way (riverCollector).
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
		Failures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "inbox_worker_failures_total",
			Help: "Attempts that failed, will be retried or snoozed, by source, cause (a stable code, as in envelope_attempt.cause) and outcome (failed, retry, snoozed).",
		}, []string{"source", "cause", "outcome"}),
		ProcessingLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "inbox_processing_latency_seconds",
			Help:    "Time to a final status, by source, status and kind: first (from receipt) or replay (from the operator's replay).",
			Buckets: []float64{.01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600, 21600, 86400},
		}, []string{"source", "status", "kind"}),
		LedgerPostings: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "inbox_ledger_postings_total",
			Help: "Ledger transactions by kind and result (posted, or skipped as already posted).",
		}, []string{"kind", "result"}),
		Heartbeat: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "inbox_worker_heartbeat_timestamp_seconds",
			Help: "When this running worker last reached its database (Unix time); alert when it stops advancing or is absent.",
		}),
		YieldLimit: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "inbox_worker_yield_limit",
			Help: "Envelopes a second this worker processes at most while ingest reports store pressure (inbox_ingest_store_pressure), 0 when not yielding; never below --yield-min-rate.",
		}),
		YieldBehind: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "inbox_worker_yield_behind_total",
			Help: "Batches processed without yielding, while yielding, because their longest-waiting job had waited longer than --yield-max-lag to be fetched: yielding defers processing no further than that.",
		}),
		YieldWithheld: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "inbox_worker_yield_withheld_seconds_total",
			Help: "Seconds this worker kept its yield limit past two quiet seconds, which would have lifted it, because its last lift was futile (unlimited, it did not catch up at all) and envelopes still arrived at over 0.8 times the rate they did then: lifting it would only take the machine from intake. It is lifted once they arrive slower (the peak's end).",
		}),
	}
	m.Unprocessed = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "inbox_worker_jobs_unprocessed_total",
		Help: "Jobs that ran and processed nothing, recording no attempt, by source and reason: not_found (the envelope is gone: the job is cancelled), lost_race (River rescued the job while this attempt lived and a later attempt owns it: this one changed nothing; a River leader's clock ahead of the database's, or a suspended host), already_done, already_failed, already_ignored, already_resolved (the envelope was final: an earlier attempt had committed, or a replay's second job raced; the job is deleted).",
	}, []string{"source", "reason"})
	reg.MustRegister(m.Attempts, m.Snoozes, m.Failures, m.ProcessingLatency, m.LedgerPostings, m.Heartbeat, m.YieldLimit, m.YieldBehind, m.YieldWithheld, m.Unprocessed)
	if pool != nil {
		m.river = newRiverCollector(pool, logger)
		m.envelopes = newEnvelopeCollector(pool, logger)
		reg.MustRegister(m.envelopes, m.river)
	}
	return m
}

// InitRiverKinds makes inbox_river_jobs export every state of each kind on
// queue, at 0 while none of its jobs is in that state (otherwise a kind
// whose jobs have all completed has no series). Without a pool it does
// nothing. Call it before the first scrape.
func (m *Worker) InitRiverKinds(queue string, kinds ...string) {
	if m.river == nil {
		return
	}
	m.river.mu.Lock()
	defer m.river.mu.Unlock()
	for _, k := range kinds {
		m.river.known = append(m.river.known, queueKind{queue, k})
	}
}

// ObserveProcessing records one envelope's time to a final status: from
// its receipt on a first processing, from replayedAt when it was replayed
// (non-nil), so replays have their own kind="replay" series.
func (m *Worker) ObserveProcessing(source, status string, receivedAt time.Time, replayedAt *time.Time, at time.Time) {
	kind, from := KindFirst, receivedAt
	if replayedAt != nil {
		kind = KindReplay
		if replayedAt.After(receivedAt) {
			from = *replayedAt
		}
	}
	m.ProcessingLatency.WithLabelValues(source, status, kind).Observe(at.Sub(from).Seconds())
}

// RunHeartbeat sets Heartbeat to now each time alive succeeds (at once,
// then every interval) until ctx ends; alive is bounded by interval. A
// worker whose database is unreachable stops beating, as does a stopped one.
func (m *Worker) RunHeartbeat(ctx context.Context, interval time.Duration, alive func(context.Context) error) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		actx, cancel := context.WithTimeout(ctx, interval)
		if alive(actx) == nil {
			m.Heartbeat.SetToCurrentTime()
		}
		cancel()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// WorkerOutcomes and SnoozeCauses are the label values Init creates zero
// series for; they are every value the worker records.
var (
	WorkerOutcomes = envelope.Outcomes()
	// SnoozeCauses are what made an attempt wait, named as the attempt's
	// own cause (envelope_attempt.cause): a refund before its payment
	// (payment_not_posted), a reversal before its refund
	// (refund_not_posted), a dependency the handler did not name
	// (not_ready), the destination's Retry-After, the source's throttle.
	SnoozeCauses = []labels.Cause{labels.CausePaymentNotPosted, labels.CauseRefundNotPosted, labels.CauseNotReady, labels.CauseRetryAfter, labels.CauseThrottled}
	// FailureCauses are the cause label values of inbox_worker_failures_total
	// (labels.Causes); FailureOutcomes its outcomes.
	FailureCauses   = labels.Causes
	FailureOutcomes = []envelope.Outcome{envelope.OutcomeFailed, envelope.OutcomeRetry, envelope.OutcomeSnoozed}
	// FinalStatuses are the status label values of
	// inbox_processing_latency_seconds; LedgerKinds and LedgerResults those
	// of inbox_ledger_postings_total.
	FinalStatuses = []envelope.Status{envelope.StatusDone, envelope.StatusIgnored, envelope.StatusFailed}
	LedgerKinds   = []ledger.Kind{ledger.KindPayment, ledger.KindRefund, ledger.KindRefundReversal}
	LedgerResults = postingResults()
)

// Init creates the zero series of each configured source (and of the
// ledger's kinds), so an alert on failed attempts or a dashboard of snoozes,
// latencies, postings or envelope counts sees 0 rather than nothing before
// the first one.
func (m *Worker) Init(sources []string) {
	if m.envelopes != nil {
		m.envelopes.mu.Lock()
		m.envelopes.sources = append(m.envelopes.sources, sources...)
		m.envelopes.mu.Unlock()
	}
	for _, s := range sources {
		for _, o := range WorkerOutcomes {
			m.Attempts.WithLabelValues(s, string(o))
		}
		for _, c := range SnoozeCauses {
			m.Snoozes.WithLabelValues(s, string(c))
		}
		for _, c := range FailureCauses {
			for _, o := range FailureOutcomes {
				m.Failures.WithLabelValues(s, string(c), string(o))
			}
		}
		for _, st := range FinalStatuses {
			m.ProcessingLatency.WithLabelValues(s, string(st), KindFirst)
			m.ProcessingLatency.WithLabelValues(s, string(st), KindReplay)
		}
		for _, r := range labels.UnprocessedReasons {
			m.Unprocessed.WithLabelValues(s, string(r))
		}
	}
	for _, k := range LedgerKinds {
		for _, r := range LedgerResults {
			m.LedgerPostings.WithLabelValues(string(k), r)
		}
	}
}

// envelopeCollector reads envelope counts and the oldest pending age from
// the database (statsCache: at most every 30 s, bounded at 3 s;
// inbox_envelope_stats_up says when it failed).
type envelopeCollector struct {
	statsCache
	pool    *pgxpool.Pool
	counts  []statusCount
	oldest  float64
	horizon time.Time // when the newest envelope partition ends
	sources []string  // configured: exported at 0 before their first envelope
}

func newEnvelopeCollector(pool *pgxpool.Pool, logger *slog.Logger) *envelopeCollector {
	c := &envelopeCollector{pool: pool}
	c.statsCache = statsCache{up: upDesc, what: "envelope statistics", logger: logger, read: c.read}
	return c
}

type statusCount struct {
	source, status string
	n              float64
}

var (
	envelopesDesc = prometheus.NewDesc("inbox_envelopes", "Envelopes by source and status.", []string{"source", "status"}, nil)
	oldestDesc    = prometheus.NewDesc("inbox_oldest_pending_age_seconds", "Age of the oldest pending envelope (0 when none).", nil, nil)
	upDesc        = prometheus.NewDesc("inbox_envelope_stats_up", "1 if the last read of envelope statistics succeeded.", nil, nil)
	horizonDesc   = prometheus.NewDesc("inbox_envelope_partition_horizon_seconds",
		"Seconds until the newest envelope partition ends: ingest cannot store past it (the worker keeps it days ahead).", nil, nil)
)

func (c *envelopeCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- envelopesDesc
	ch <- oldestDesc
	ch <- upDesc
	ch <- horizonDesc
}

func (c *envelopeCollector) Collect(ch chan<- prometheus.Metric) {
	c.collect(ch, func() {
		for _, sc := range c.counts {
			ch <- prometheus.MustNewConstMetric(envelopesDesc, prometheus.GaugeValue, sc.n, sc.source, sc.status)
		}
		ch <- prometheus.MustNewConstMetric(oldestDesc, prometheus.GaugeValue, c.oldest)
		ch <- prometheus.MustNewConstMetric(horizonDesc, prometheus.GaugeValue, time.Until(c.horizon).Seconds())
	})
}

func (c *envelopeCollector) read(ctx context.Context) error {
	bySource, err := envelope.CountBySource(ctx, c.pool, false)
	if err != nil {
		return err
	}
	var counts []statusCount
	for _, sc := range bySource {
		for _, st := range envelope.Statuses() {
			counts = append(counts, statusCount{source: sc.Source, status: string(st), n: float64(sc.Of(st))})
		}
	}
	oldest, err := envelope.OldestPending(ctx, c.pool)
	if err != nil {
		return err
	}
	horizon, err := envelope.PartitionHorizon(ctx, c.pool)
	if err != nil {
		return err
	}
	c.counts, c.oldest, c.horizon = withZeros(counts, c.sources), 0, horizon
	if oldest != nil {
		c.oldest = oldest.AgeSeconds
	}
	return nil
}

// withZeros adds a 0 for each envelope status (envelope.Statuses) a source
// in counts or configured has no count of, so a status that empties, or a
// configured source without envelopes yet, does not vanish from dashboards
// and alerts.
func withZeros(counts []statusCount, configured []string) []statusCount {
	seen := map[string]map[string]bool{}
	var sources []string
	for _, src := range configured {
		if seen[src] == nil {
			seen[src] = map[string]bool{}
			sources = append(sources, src)
		}
	}
	for _, sc := range counts {
		if seen[sc.source] == nil {
			seen[sc.source] = map[string]bool{}
			sources = append(sources, sc.source)
		}
		seen[sc.source][sc.status] = true
	}
	for _, src := range sources {
		for _, st := range envelope.Statuses() {
			if !seen[src][string(st)] {
				counts = append(counts, statusCount{source: src, status: string(st)})
			}
		}
	}
	return counts
}

// NewRegistry returns a registry with the Go runtime and process collectors
// and inbox_build_info.
func NewRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), BuildInfo(version.Get()))
	return reg
}

// BuildInfo returns the inbox_build_info gauge: always 1, its labels say
// what the binary was built from (join it to other series with on(instance)
// group_left to see which version an alert fired on).
func BuildInfo(v version.Info) prometheus.Collector {
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "inbox_build_info",
		Help:        "Build of this binary: module version, VCS revision, Go version (always 1).",
		ConstLabels: prometheus.Labels{"version": v.Version, "revision": v.Revision, "goversion": v.GoVersion},
	})
	g.Set(1)
	return g
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
