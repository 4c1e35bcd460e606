package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Backfill holds the periodic reconcile's metrics (the worker's; the
// `worker backfill` command records its runs in backfill_run only).
type Backfill struct {
	// Missing counts events the provider never delivered, as the
	// reconcile found them (then stored, or had redelivered).
	Missing *prometheus.CounterVec
	// Stored counts what the reconcile stored (Stripe) or had redelivered
	// (GitHub).
	Stored *prometheus.CounterVec
	// Runs counts reconcile runs by result: done, failed, interrupted.
	Runs *prometheus.CounterVec
	// LastSuccess is the Unix time of each source's last run that ended
	// done.
	LastSuccess *prometheus.GaugeVec
}

// Reconcile run results (the result label of inbox_backfill_runs_total).
var backfillResults = []string{"done", "failed", "interrupted"}

// NewBackfill registers the reconcile's metrics on reg.
func NewBackfill(reg prometheus.Registerer) *Backfill {
	m := &Backfill{
		Missing: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "inbox_backfill_missing_total",
			Help: "Events the provider never delivered, found in its own log by the periodic reconcile (Stripe: then stored; GitHub: then redelivered). Anything above 0 means webhooks were lost.",
		}, []string{"source"}),
		Stored: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "inbox_backfill_stored_total",
			Help: "Events the periodic reconcile stored (Stripe) or had the provider redeliver (GitHub).",
		}, []string{"source"}),
		Runs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "inbox_backfill_runs_total",
			Help: "Periodic reconcile runs by source and result (done, failed, interrupted).",
		}, []string{"source", "result"}),
		LastSuccess: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "inbox_backfill_last_success_timestamp_seconds",
			Help: "Unix time of the source's last reconcile run that completed (0: none since the worker started).",
		}, []string{"source"}),
	}
	reg.MustRegister(m.Missing, m.Stored, m.Runs, m.LastSuccess)
	return m
}

// Init creates the zero series of each reconciled source.
func (m *Backfill) Init(sources []string) {
	for _, s := range sources {
		m.Missing.WithLabelValues(s)
		m.Stored.WithLabelValues(s)
		m.LastSuccess.WithLabelValues(s)
		for _, r := range backfillResults {
			m.Runs.WithLabelValues(s, r)
		}
	}
}

// ObserveRun records one reconcile run of source.
func (m *Backfill) ObserveRun(source, result string, found, stored int, at time.Time) {
	m.Runs.WithLabelValues(source, result).Inc()
	m.Missing.WithLabelValues(source).Add(float64(found))
	m.Stored.WithLabelValues(source).Add(float64(stored))
	if result == "done" {
		m.LastSuccess.WithLabelValues(source).Set(float64(at.Unix()))
	}
}
