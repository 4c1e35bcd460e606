package metrics_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"

	"github.com/inboxhq/inbox/internal/labels"
	"github.com/inboxhq/inbox/internal/metrics"
	"github.com/inboxhq/inbox/internal/pgtest"
	"github.com/inboxhq/inbox/internal/version"
)

// gather returns reg's families by name.
func gather(t *testing.T, reg prometheus.Gatherer) map[string]*dto.MetricFamily {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	out := map[string]*dto.MetricFamily{}
	for _, mf := range mfs {
		out[mf.GetName()] = mf
	}
	return out
}

// find returns the series of mf whose labels include every name, value
// pair of labels, or nil.
func find(mf *dto.MetricFamily, labels ...string) *dto.Metric {
	if mf == nil {
		return nil
	}
next:
	for _, m := range mf.GetMetric() {
		have := map[string]string{}
		for _, lp := range m.GetLabel() {
			have[lp.GetName()] = lp.GetValue()
		}
		for i := 0; i+1 < len(labels); i += 2 {
			if v, ok := have[labels[i]]; !ok || v != labels[i+1] {
				continue next
			}
		}
		return m
	}
	return nil
}

func TestMetricsIngestInitEveryOutcome(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	m := metrics.NewIngest(reg)
	m.Init([]string{"stripe", "github"})
	mfs := gather(t, reg)
	for _, src := range []string{"stripe", "github"} {
		for _, o := range labels.IngestOutcomes {
			s := find(mfs["inbox_ingest_requests_total"], "source", src, "outcome", string(o))
			require.NotNil(t, s, "%s %s", src, o)
			require.Zero(t, s.GetCounter().GetValue())
		}
		require.NotNil(t, find(mfs["inbox_ingest_conflicts_total"], "source", src))
		require.NotNil(t, find(mfs["inbox_ingest_signature_failures_total"], "source", src, "reason", metrics.SignatureNoMatch))
		require.NotNil(t, find(mfs["inbox_ingest_duplicates_total"], "source", src))
		require.NotNil(t, find(mfs["inbox_ingest_request_duration_seconds"], "source", src, "outcome", "accepted"))
	}
	require.NotNil(t, find(mfs["inbox_ingest_requests_total"], "source", labels.UnknownSourceName, "outcome", "unknown_source"))
	// 2 sources x every outcome, plus unknown_source.
	require.Len(t, mfs["inbox_ingest_requests_total"].GetMetric(), 2*len(labels.IngestOutcomes)+1)

	m.Observe("stripe", "unavailable", "", time.Millisecond)
	mfs = gather(t, reg)
	require.Equal(t, 1.0, find(mfs["inbox_ingest_requests_total"], "source", "stripe", "outcome", "unavailable").GetCounter().GetValue())
}

func TestMetricsWorkerInitEveryOutcome(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	m := metrics.NewWorker(reg, nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	m.Init([]string{"payments"})
	mfs := gather(t, reg)
	for _, o := range metrics.WorkerOutcomes {
		require.NotNil(t, find(mfs["inbox_worker_attempts_total"], "source", "payments", "outcome", string(o)), o)
	}
	for _, c := range metrics.SnoozeCauses {
		require.NotNil(t, find(mfs["inbox_worker_snoozes_total"], "source", "payments", "cause", string(c)), c)
	}
	for _, c := range metrics.FailureCauses {
		for _, o := range metrics.FailureOutcomes {
			require.NotNil(t, find(mfs["inbox_worker_failures_total"], "source", "payments", "cause", string(c), "outcome", string(o)), c, o)
		}
	}
	for _, st := range metrics.FinalStatuses {
		for _, k := range []string{metrics.KindFirst, metrics.KindReplay} {
			require.NotNil(t, find(mfs["inbox_processing_latency_seconds"], "source", "payments", "status", string(st), "kind", k), st, k)
		}
	}
	for _, k := range metrics.LedgerKinds {
		for _, r := range metrics.LedgerResults {
			require.NotNil(t, find(mfs["inbox_ledger_postings_total"], "kind", string(k), "result", r), k, r)
		}
	}
	require.Contains(t, mfs, "inbox_worker_heartbeat_timestamp_seconds")
}

func TestMetricsReplayLatencyIsItsOwnKind(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	m := metrics.NewWorker(reg, nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	now := time.Now()
	received := now.Add(-7 * 24 * time.Hour)
	replayed := now.Add(-2 * time.Second)
	m.ObserveProcessing("payments", "done", now.Add(-300*time.Millisecond), nil, now)
	m.ObserveProcessing("payments", "done", received, &replayed, now)

	mfs := gather(t, reg)
	first := find(mfs["inbox_processing_latency_seconds"], "source", "payments", "status", "done", "kind", metrics.KindFirst).GetHistogram()
	require.EqualValues(t, 1, first.GetSampleCount(), "the replay is not a first processing")
	require.InDelta(t, 0.3, first.GetSampleSum(), 0.001)
	replay := find(mfs["inbox_processing_latency_seconds"], "source", "payments", "status", "done", "kind", metrics.KindReplay).GetHistogram()
	require.EqualValues(t, 1, replay.GetSampleCount())
	require.InDelta(t, 2, replay.GetSampleSum(), 0.001, "timed from the replay, not from the week-old receipt")
}

func TestMetricsBuildInfo(t *testing.T) {
	t.Parallel()
	mfs := gather(t, metrics.NewRegistry())
	v := version.Get()
	s := find(mfs["inbox_build_info"], "version", v.Version, "revision", v.Revision, "goversion", v.GoVersion)
	require.NotNil(t, s, "inbox_build_info with this build's labels: %v", mfs["inbox_build_info"])
	require.Equal(t, 1.0, s.GetGauge().GetValue())
}

func TestMetricsHeartbeat(t *testing.T) {
	t.Parallel()
	for name, alive := range map[string]error{"beats": nil, "database unreachable": errors.New("down")} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			reg := prometheus.NewRegistry()
			m := metrics.NewWorker(reg, nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
			ctx, cancel := context.WithCancel(context.Background())
			calls := make(chan struct{}, 100)
			done := make(chan struct{})
			go func() {
				m.RunHeartbeat(ctx, 5*time.Millisecond, func(context.Context) error {
					select {
					case calls <- struct{}{}:
					default:
					}
					return alive
				})
				close(done)
			}()
			for range 3 { // at least two beats after the first
				<-calls
			}
			cancel()
			<-done
			got := gather(t, reg)["inbox_worker_heartbeat_timestamp_seconds"].GetMetric()[0].GetGauge().GetValue()
			if alive != nil {
				require.Zero(t, got, "no beat while the database is unreachable")
				return
			}
			require.InDelta(t, float64(time.Now().UnixNano())/1e9, got, 5)
		})
	}
}

func TestMetricsDatabaseCollectors(t *testing.T) {
	t.Parallel()
	url := pgtest.NewURL(t)
	owner, err := pgxpool.New(context.Background(), url)
	require.NoError(t, err)
	t.Cleanup(owner.Close)
	ctx := context.Background()
	_, err = owner.Exec(ctx, `INSERT INTO river_job (kind, args, max_attempts, state, scheduled_at, finalized_at)
		SELECT 'process_envelope', '{}', 25, s::river_job_state, now() - interval '90 seconds',
		       CASE WHEN s IN ('completed', 'discarded', 'cancelled') THEN now() END
		FROM unnest(ARRAY['available', 'available', 'running', 'completed', 'completed', 'completed', 'discarded']) AS s`)
	require.NoError(t, err)

	// As the worker's role: the grants it runs with are enough.
	pool, err := pgxpool.New(ctx, pgtest.RoleURL(t, url, pgtest.RoleWorker))
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	reg := prometheus.NewRegistry()
	m := metrics.NewWorker(reg, pool, slog.New(slog.NewTextHandler(io.Discard, nil)))
	m.InitRiverKinds("default", "process_envelope", "purge_envelopes", "purge_envelopes")
	m.Init([]string{"payments"})
	mfs := gather(t, reg)
	for _, st := range []string{"pending", "done", "failed", "ignored"} {
		s := find(mfs["inbox_envelopes"], "source", "payments", "status", st)
		require.NotNil(t, s, "a configured source with no envelope yet: %s", st)
		require.Zero(t, s.GetGauge().GetValue())
	}
	require.Equal(t, 1.0, mfs["inbox_river_stats_up"].GetMetric()[0].GetGauge().GetValue())
	jobs := mfs["inbox_river_jobs"]
	want := map[string]float64{"available": 2, "running": 1, "discarded": 1, "retryable": 0, "scheduled": 0, "pending": 0, "cancelled": 0}
	for st, n := range want {
		s := find(jobs, "queue", "default", "kind", "process_envelope", "state", st)
		require.NotNil(t, s, st)
		require.Equal(t, n, s.GetGauge().GetValue(), st)
	}
	require.Nil(t, find(jobs, "state", "completed"), "completed jobs are not counted")
	for _, st := range metrics.RiverStates {
		s := find(jobs, "kind", "purge_envelopes", "state", st)
		require.NotNil(t, s, "a kind given to InitRiverKinds has every state with no job: %s", st)
		require.Zero(t, s.GetGauge().GetValue())
	}
	require.Len(t, jobs.GetMetric(), 2*len(metrics.RiverStates))
	age := mfs["inbox_river_oldest_available_age_seconds"].GetMetric()[0].GetGauge().GetValue()
	require.InDelta(t, 90, age, 30)
}

// A database that cannot be read gives stats_up 0 (and no made-up counts),
// not a failed scrape.
func TestMetricsDatabaseCollectorsDown(t *testing.T) {
	t.Parallel()
	pool, err := pgxpool.New(context.Background(), pgtest.NewURL(t))
	require.NoError(t, err)
	pool.Close() // every query now fails
	reg := prometheus.NewRegistry()
	m := metrics.NewWorker(reg, pool, slog.New(slog.NewTextHandler(io.Discard, nil)))
	m.InitRiverKinds("default", "process_envelope")
	mfs := gather(t, reg)
	require.Zero(t, mfs["inbox_envelope_stats_up"].GetMetric()[0].GetGauge().GetValue())
	require.Zero(t, mfs["inbox_river_stats_up"].GetMetric()[0].GetGauge().GetValue())
	require.NotContains(t, mfs, "inbox_river_jobs", "no counts were read")
}

// The console's standby lag is read at each scrape: its value and up=1, or
// up=0 and no value when the standby does not answer.
func TestMetricsReadLag(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	lag, fail := 1500*time.Millisecond, false
	metrics.RegisterReadLag(reg, func(ctx context.Context) (time.Duration, error) {
		if _, ok := ctx.Deadline(); !ok {
			return 0, errors.New("no deadline: a stalled standby would hold the scrape")
		}
		if fail {
			return 0, errors.New("connection refused")
		}
		return lag, nil
	})
	mfs := gather(t, reg)
	require.Equal(t, 1.0, mfs["inbox_console_read_lag_up"].GetMetric()[0].GetGauge().GetValue())
	require.Equal(t, 1.5, mfs["inbox_console_read_lag_seconds"].GetMetric()[0].GetGauge().GetValue())
	fail = true
	mfs = gather(t, reg)
	require.Equal(t, 0.0, mfs["inbox_console_read_lag_up"].GetMetric()[0].GetGauge().GetValue())
	require.NotContains(t, mfs, "inbox_console_read_lag_seconds")
}
