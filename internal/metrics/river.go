package metrics

import (
	"context"
	"log/slog"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
)

// RiverStates are the River job states inbox_river_jobs exports, each per
// queue and kind even at 0. Completed jobs are not counted: the worker
// deletes a processing job when it finishes its envelope, River keeps the
// ones it completes itself (periodic jobs) for --completed-job-retention,
// and inbox_worker_attempts_total counts finished attempts instead.
var RiverStates = []string{"available", "pending", "scheduled", "running", "retryable", "discarded", "cancelled"}

var (
	riverJobsDesc = prometheus.NewDesc("inbox_river_jobs",
		"River jobs by queue, kind and state (completed not counted); available+running+retryable+scheduled is the queue depth.",
		[]string{"queue", "kind", "state"}, nil)
	riverOldestDesc = prometheus.NewDesc("inbox_river_oldest_available_age_seconds",
		"How long the oldest available River job has been due (0 when none): time jobs wait for a worker.", nil, nil)
	riverUpDesc = prometheus.NewDesc("inbox_river_stats_up", "1 if the last read of River job statistics succeeded.", nil, nil)
)

// riverCollector reads River job counts from river_job (statsCache: at most
// every 30 s, bounded at 3 s; inbox_river_stats_up says when it failed).
type riverCollector struct {
	statsCache
	pool   *pgxpool.Pool
	counts []riverCount
	oldest float64
	known  []queueKind // every (queue, kind) seen since start, in order
}

func newRiverCollector(pool *pgxpool.Pool, logger *slog.Logger) *riverCollector {
	c := &riverCollector{pool: pool}
	c.statsCache = statsCache{up: riverUpDesc, what: "River job statistics", logger: logger, read: c.read}
	return c
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
	c.collect(ch, func() {
		for _, rc := range c.counts {
			ch <- prometheus.MustNewConstMetric(riverJobsDesc, prometheus.GaugeValue, rc.n, rc.queue, rc.kind, rc.state)
		}
		ch <- prometheus.MustNewConstMetric(riverOldestDesc, prometheus.GaugeValue, c.oldest)
	})
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
