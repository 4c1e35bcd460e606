package worker_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/inboxhq/inbox/internal/admin"
	"github.com/inboxhq/inbox/internal/envelope"
	"github.com/inboxhq/inbox/internal/metrics"
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
	reg := prometheus.NewRegistry()
	m := metrics.NewWorker(reg, nil, logger)
	m.Init([]string{"src"})
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
	require.Eventually(t, func() bool {
		return b.count(t, `SELECT count(*) FROM envelope WHERE id = $1 AND status = 'done' AND attempts = 2`, id) == 1
	}, 20*time.Second, 10*time.Millisecond)

	hist := func(kind string) (uint64, float64) {
		mfs, err := reg.Gather()
		require.NoError(t, err)
		for _, mf := range mfs {
			if mf.GetName() != "inbox_processing_latency_seconds" {
				continue
			}
			for _, s := range mf.GetMetric() {
				labels := map[string]string{}
				for _, l := range s.GetLabel() {
					labels[l.GetName()] = l.GetValue()
				}
				if labels["kind"] == kind && labels["status"] == "done" && labels["source"] == "src" {
					return s.GetHistogram().GetSampleCount(), s.GetHistogram().GetSampleSum()
				}
			}
		}
		t.Fatalf("no %s series", kind)
		return 0, 0
	}
	// The worker counts after its commit: wait for the replay's sample.
	require.Eventually(t, func() bool { n, _ := hist(metrics.KindReplay); return n == 1 }, 10*time.Second, 10*time.Millisecond)
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
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	reg := prometheus.NewRegistry()
	m := metrics.NewWorker(reg, nil, logger)
	m.Init([]string{"src"})
	ids := []int64{
		b.insert(t, "standard", "bad-1", "payment.succeeded", webhooktest.StandardPayment("p1", "m", 100, "XYZ"), 0),
		b.insert(t, "standard", "bad-2", "payment.succeeded", webhooktest.StandardPayment("p2", "m", 100, "XYZ"), 0),
	}
	b.runConfig(t, worker.Config{Metrics: m})
	for _, id := range ids {
		require.Equal(t, envelope.StatusFailed, b.waitFinal(t, id).Status)
	}
	value := func(cause, outcome string) float64 {
		mfs, err := reg.Gather()
		require.NoError(t, err)
		for _, mf := range mfs {
			if mf.GetName() != "inbox_worker_failures_total" {
				continue
			}
			for _, s := range mf.GetMetric() {
				labels := map[string]string{}
				for _, l := range s.GetLabel() {
					labels[l.GetName()] = l.GetValue()
				}
				if labels["source"] == "src" && labels["cause"] == cause && labels["outcome"] == outcome {
					return s.GetCounter().GetValue()
				}
			}
		}
		t.Fatalf("no series for %s %s", cause, outcome)
		return 0
	}
	// The worker counts after its commit.
	require.Eventually(t, func() bool { return value("unknown_currency", "failed") == 2 }, 10*time.Second, 10*time.Millisecond)
	require.Zero(t, value("internal", "failed"))
	require.Zero(t, value("unknown_currency", "retry"))
}

// A ledger posting is counted by kind and result, from what the handler
// reports of its run: the payment posted once, and skipped when the same
// payment arrives under a second delivery id.
func TestMetricsLedgerPostingsCounted(t *testing.T) {
	t.Parallel()
	b := setup(t)
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	reg := prometheus.NewRegistry()
	m := metrics.NewWorker(reg, nil, logger)
	m.Init([]string{"src"})
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
		mfs, err := reg.Gather()
		require.NoError(t, err)
		for _, mf := range mfs {
			if mf.GetName() != "inbox_ledger_postings_total" {
				continue
			}
			for _, s := range mf.GetMetric() {
				labels := map[string]string{}
				for _, l := range s.GetLabel() {
					labels[l.GetName()] = l.GetValue()
				}
				if labels["kind"] == kind && labels["result"] == result {
					return s.GetCounter().GetValue()
				}
			}
		}
		t.Fatalf("no series for %s %s", kind, result)
		return 0
	}
	// The worker counts after its commit.
	require.Eventually(t, func() bool { return value("payment", "posted")+value("payment", "skipped") == 2 }, 10*time.Second, 10*time.Millisecond)
	require.Equal(t, 1.0, value("payment", "posted"))
	require.Equal(t, 1.0, value("payment", "skipped"))
	require.Zero(t, value("refund", "posted"))
}
