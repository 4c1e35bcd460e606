package metrics

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
)

// RiverStates are the River job states inbox_river_jobs exports, each per
// queue and kind even at 0. River's completed jobs are not counted: River
// keeps them for a day, so counting them would read most of river_job on
// every refresh; inbox_worker_attempts_total counts completions instead.
var RiverStates = []string{"available", "pending", "scheduled", "running", "retryable", "discarded", "cancelled"}

var (
	riverJobsDesc = prometheus.NewDesc("inbox_river_jobs",
		"River jobs by queue, kind and state (completed not counted); available+running+retryable+scheduled is the queue depth.",
		[]string{"queue", "kind", "state"}, nil)
	riverOldestDesc = prometheus.NewDesc("inbox_river_oldest_available_age_seconds",
		"How long the oldest available River job has been due (0 when none): time jobs wait for a worker.", nil, nil)
	riverUpDesc = prometheus.NewDesc("inbox_river_stats_up", "1 if the last read of River job statistics succeeded.", nil, nil)
)

// riverCollector reads River job counts from river_job, caching them for
// 30 s like envelopeCollector; one read is bounded at 3 s, and
// inbox_river_stats_up says when it failed (the last counts are kept).
type riverCollector struct {
	pool   *pgxpool.Pool
	logger *slog.Logger

	mu     sync.Mutex
	at     time.Time
	counts []riverCount
	oldest float64
	err    error
	known  []queueKind // every (queue, kind) seen since start, in order
}

type queueKind struct{ queue, kind string }

type riverCount struct {
	queue, kind, state string
	n                  float64
}

func (c *riverCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- riverJobsDesc
	ch <- riverOldestDesc
	ch <- riverUpDesc
}

func (c *riverCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if time.Since(c.at) > 30*time.Second {
		c.refresh()
	}
	up := 1.0
	if c.err != nil {
		up = 0
	}
	ch <- prometheus.MustNewConstMetric(riverUpDesc, prometheus.GaugeValue, up)
	for _, rc := range c.counts {
		ch <- prometheus.MustNewConstMetric(riverJobsDesc, prometheus.GaugeValue, rc.n, rc.queue, rc.kind, rc.state)
	}
	ch <- prometheus.MustNewConstMetric(riverOldestDesc, prometheus.GaugeValue, c.oldest)
}

func (c *riverCollector) refresh() {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	c.err = c.read(ctx)
	if c.err != nil {
		c.logger.Warn("read River job statistics", "error", c.err)
	}
	c.at = time.Now()
}

func (c *riverCollector) read(ctx context.Context) error {
	// state = ANY(...) lets river_job_prioritized_fetching_index (state
	// first) skip the completed jobs.
	rows, err := c.pool.Query(ctx, `SELECT queue, kind, state::text, count(*)::float8 FROM river_job
		WHERE state = ANY($1::river_job_state[]) GROUP BY 1, 2, 3`, RiverStates)
	if err != nil {
		return err
	}
	var counts []riverCount
	for rows.Next() {
		var rc riverCount
		if err := rows.Scan(&rc.queue, &rc.kind, &rc.state, &rc.n); err != nil {
			rows.Close()
			return err
		}
		counts = append(counts, rc)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	var oldest float64
	if err := c.pool.QueryRow(ctx, `SELECT coalesce(extract(epoch FROM now() - min(scheduled_at)), 0)::float8
		FROM river_job WHERE state = 'available' AND scheduled_at <= now()`).Scan(&oldest); err != nil {
		return err
	}
	c.counts, c.known = riverWithZeros(counts, c.known)
	c.oldest = max(oldest, 0)
	return nil
}

// riverWithZeros adds a 0 for every state of each (queue, kind) in counts
// or known, so a state (or a kind whose jobs all completed) that empties
// does not vanish from dashboards and alerts. It returns known with the
// pairs of counts added.
func riverWithZeros(counts []riverCount, known []queueKind) ([]riverCount, []queueKind) {
	seen := map[queueKind]map[string]bool{}
	for _, k := range known {
		seen[k] = map[string]bool{}
	}
	for _, rc := range counts {
		k := queueKind{rc.queue, rc.kind}
		if seen[k] == nil {
			seen[k] = map[string]bool{}
			known = append(known, k)
		}
		seen[k][rc.state] = true
	}
	for _, k := range known {
		for _, st := range RiverStates {
			if !seen[k][st] {
				seen[k][st] = true // once, even if known repeats k
				counts = append(counts, riverCount{queue: k.queue, kind: k.kind, state: st})
			}
		}
	}
	return counts, known
}
