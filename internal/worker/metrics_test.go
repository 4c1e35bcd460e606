package worker_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/inboxhq/inbox/internal/admin"
	"github.com/inboxhq/inbox/internal/envelope"
	"github.com/inboxhq/inbox/internal/metrics"
	"github.com/inboxhq/inbox/internal/pgtest"
	"github.com/inboxhq/inbox/internal/webhooktest"
	"github.com/inboxhq/inbox/internal/worker"
)

// A replay is timed from the replay, under kind="replay": replaying an
// envelope received a week ago adds nothing to the first-processing
// latency and no week to any histogram.
func TestMetricsReplayedEnvelopeIsTimedAsAReplay(t *testing.T) {
	t.Parallel()
	b := setup(t)
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	reg, m := newMetrics(t)
	id := b.insert(t, "standard", "d-1", "payment.succeeded", webhooktest.StandardPayment("pay_1", "m_1", 250, "EUR"), 0)
	b.runConfig(t, worker.Config{Metrics: m})
	require.Equal(t, envelope.StatusDone, b.waitFinal(t, id).Status)

	_, err := b.pool.Exec(context.Background(), `UPDATE envelope SET received_at = now() - interval '7 days' WHERE id = $1`, id)
	require.NoError(t, err)
	rc, err := envelope.NewInsertClient(b.pool, logger)
	require.NoError(t, err)
	res, err := admin.Replay(context.Background(), b.pool, rc, admin.ReplayRequest{Filter: admin.Filter{IDs: []int64{id}}, Actor: "test", Reason: "metrics"})
	require.NoError(t, err)
	require.Equal(t, 1, res.Replayed)
	pgtest.Eventually(t, 20*time.Second, "the replay to be done at the second attempt", func() (bool, string) {
		return pgtest.Count(t, b.pool, `SELECT count(*) FROM envelope WHERE id = $1 AND status = 'done' AND attempts = 2`, id) == 1, ""
	})

	hist := func(kind string) (uint64, float64) {
		ss := series(t, reg, "inbox_processing_latency_seconds", map[string]string{"kind": kind, "status": "done", "source": "src"})
		if len(ss) == 0 {
			t.Fatalf("no %s series", kind)
		}
		return ss[0].GetHistogram().GetSampleCount(), ss[0].GetHistogram().GetSampleSum()
	}
	// The worker counts after its commit: wait for the replay's sample.
	pgtest.Eventually(t, 10*time.Second, "one replay in the processing histogram", func() (bool, string) { n, _ := hist(metrics.KindReplay); return n == 1, "" })
	n, sum := hist(metrics.KindFirst)
	require.EqualValues(t, 1, n, "the replay is not a first processing")
	require.Less(t, sum, 60.0)
	_, sum = hist(metrics.KindReplay)
	require.Less(t, sum, 60.0, "timed from the replay, not from the week-old receipt")
}

// A failure is counted under its cause and outcome, once per attempt.
func TestMetricsFailuresCountedByCause(t *testing.T) {
	t.Parallel()
	b := setup(t)
	reg, m := newMetrics(t)
	ids := []int64{
		b.insert(t, "standard", "bad-1", "payment.succeeded", webhooktest.StandardPayment("p1", "m", 100, "XYZ"), 0),
		b.insert(t, "standard", "bad-2", "payment.succeeded", webhooktest.StandardPayment("p2", "m", 100, "XYZ"), 0),
	}
	b.runConfig(t, worker.Config{Metrics: m})
	for _, id := range ids {
		require.Equal(t, envelope.StatusFailed, b.waitFinal(t, id).Status)
	}
	value := func(cause, outcome string) float64 {
		return counter(t, reg, "inbox_worker_failures_total", map[string]string{"source": "src", "cause": cause, "outcome": outcome})
	}
	// The worker counts after its commit.
	pgtest.Eventually(t, 10*time.Second, "two unknown_currency failures counted", func() (bool, string) { return value("unknown_currency", "failed") == 2, "" })
	require.Zero(t, value("internal", "failed"))
	require.Zero(t, value("unknown_currency", "retry"))
}

// A ledger posting is counted by kind and result, from what the handler
// reports of its run: the payment posted once, and skipped when the same
// payment arrives under a second delivery id.
func TestMetricsLedgerPostingsCounted(t *testing.T) {
	t.Parallel()
	b := setup(t)
	reg, m := newMetrics(t)
	body := webhooktest.StandardPayment("pay_lp", "m_lp", 300, "EUR")
	ids := []int64{
		b.insert(t, "standard", "lp-1", "payment.succeeded", body, 0),
		b.insert(t, "standard", "lp-2", "payment.succeeded", body, 0),
	}
	b.runConfig(t, worker.Config{Metrics: m})
	for _, id := range ids {
		require.Equal(t, envelope.StatusDone, b.waitFinal(t, id).Status)
	}
	value := func(kind, result string) float64 {
		return counter(t, reg, "inbox_ledger_postings_total", map[string]string{"kind": kind, "result": result})
	}
	// The worker counts after its commit.
	pgtest.Eventually(t, 10*time.Second, "two payment ledger results counted", func() (bool, string) { return value("payment", "posted")+value("payment", "skipped") == 2, "" })
	require.Equal(t, 1.0, value("payment", "posted"))
	require.Equal(t, 1.0, value("payment", "skipped"))
	require.Zero(t, value("refund", "posted"))
}

// A job that runs and processes nothing records no attempt, so only
// inbox_worker_jobs_unprocessed_total says it ran: a replay's second job
// finding its envelope already done, a job rescued as stuck whose later
// attempt owns it now (lost race), a job whose envelope is gone. None of
// them counts as an attempt.
func TestMetricsJobsThatProcessNothingAreCounted(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	reg, m := newMetrics(t)
	id := b.insert(t, "standard", "u-1", "payment.succeeded", webhooktest.StandardPayment("pay_u", "m_u", 100, "EUR"), 0)
	b.runConfig(t, worker.Config{Metrics: m})
	require.Equal(t, envelope.StatusDone, b.waitFinal(t, id).Status)
	unprocessed := func(reason string) float64 {
		return counter(t, reg, "inbox_worker_jobs_unprocessed_total", map[string]string{"source": "src", "reason": reason})
	}
	// Every attempt of the source, whatever its outcome label.
	attempts := func() float64 {
		return total(t, reg, "inbox_worker_attempts_total", map[string]string{"source": "src"})
	}
	pgtest.Eventually(t, 10*time.Second, "the first job's attempt counted", func() (bool, string) { return attempts() == 1, "" })
	require.Zero(t, unprocessed("already_done"), "the first job processed its envelope")

	// A second job of the done envelope, as a replay's that raced: it finds
	// the envelope final and is deleted.
	rc, err := envelope.NewInsertClient(b.pool, slog.New(slog.NewTextHandler(io.Discard, nil)))
	require.NoError(t, err)
	_, err = rc.InsertMany(ctx, []river.InsertManyParams{envelope.ProcessJob(id, "src", 0)})
	require.NoError(t, err)
	pgtest.Eventually(t, 10*time.Second, "the second job counted as unprocessed", func() (bool, string) {
		return unprocessed("already_done") == 1, fmt.Sprintf("already_done %v", unprocessed("already_done"))
	})
	require.Zero(t, pgtest.Count(t, b.pool, `SELECT count(*) FROM river_job WHERE (args->>'envelope_id')::bigint = $1`, id), "the second job deleted")
	require.Equal(t, 1, b.state(t, id).Attempts, "no attempt recorded for it")
	require.Equal(t, 1.0, attempts(), "nor counted as one")

	// A stale attempt of a job that is gone (lost race), and a job whose
	// envelope is gone.
	w := &worker.ProcessWorker{Pool: b.worker, Registry: b.registry, Policy: worker.DefaultPolicy,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Name: "stale", Metrics: m}
	work := func(jobID, envelopeID int64) error {
		return w.Work(ctx, &river.Job[envelope.ProcessArgs]{
			JobRow: &rivertype.JobRow{ID: jobID, Attempt: 1, MaxAttempts: 25, State: rivertype.JobStateRunning},
			Args:   envelope.ProcessArgs{EnvelopeID: envelopeID, Source: "src"},
		})
	}
	require.Error(t, work(1<<62, id), "a lost race goes to River as an error")
	require.Equal(t, 1.0, unprocessed("lost_race"))
	var cancel *rivertype.JobCancelError
	require.ErrorAs(t, work(1<<62, 1<<62), &cancel, "a job whose envelope is gone is cancelled")
	require.Equal(t, 1.0, unprocessed("not_found"))
	require.Equal(t, 1.0, unprocessed("already_done"))
	require.Zero(t, unprocessed("already_failed"))
	require.Equal(t, 1.0, attempts())
	require.Equal(t, 1.0, total(t, reg, "inbox_processing_latency_seconds", map[string]string{"source": "src"}), "one processing timed")
}

// series returns reg's series of the metric name whose labels include
// want.
func series(t *testing.T, reg *prometheus.Registry, name string, want map[string]string) []*dto.Metric {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	var out []*dto.Metric
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, s := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range s.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			for k, v := range want {
				if labels[k] != v {
					continue next
				}
			}
			out = append(out, s)
		}
	}
	return out
}

// total is the sum of reg's counters (or histograms' sample counts) name
// whose labels include want; 0 when none has them.
func total(t *testing.T, reg *prometheus.Registry, name string, want map[string]string) float64 {
	t.Helper()
	var sum float64
	for _, s := range series(t, reg, name, want) {
		if h := s.GetHistogram(); h != nil {
			sum += float64(h.GetSampleCount())
		} else {
			sum += s.GetCounter().GetValue()
		}
	}
	return sum
}

// counter is the value of reg's counter name with the labels want (the
// series must exist).
func counter(t *testing.T, reg *prometheus.Registry, name string, want map[string]string) float64 {
	t.Helper()
	ss := series(t, reg, name, want)
	if len(ss) == 0 {
		t.Fatalf("no series %s %v", name, want)
	}
	return ss[0].GetCounter().GetValue()
}

// newMetrics is a registry and the worker's metrics on it, for source src.
func newMetrics(t *testing.T) (*prometheus.Registry, *metrics.Worker) {
	t.Helper()
	reg := prometheus.NewRegistry()
	m := metrics.NewWorker(reg, nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	m.Init([]string{"src"})
	return reg, m
}
