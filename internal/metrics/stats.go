package metrics

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// How often, and for how long at most, a statistics collector reads the
// database: scrapes in between get the cached values, so frequent scrapes
// do not load it.
const (
	statsEvery   = 30 * time.Second
	statsTimeout = 3 * time.Second
)

// statsCache is what the database-reading collectors (envelope counts,
// River job counts) share: a read refreshed at most every statsEvery and
// bounded at statsTimeout, whose failure keeps the last values and sets the
// collector's up gauge to 0. read sets the collector's values, and only when
// it succeeds; it runs with mu held, as does emit.
type statsCache struct {
	up     *prometheus.Desc
	what   string // for the log line of a failed read
	logger *slog.Logger
	read   func(ctx context.Context) error

	mu  sync.Mutex
	at  time.Time
	err error
}

// collect refreshes the values when due, sends the up gauge, then calls emit
// to send the values.
func (c *statsCache) collect(ch chan<- prometheus.Metric, emit func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if time.Since(c.at) > statsEvery {
		ctx, cancel := context.WithTimeout(context.Background(), statsTimeout)
		c.err = c.read(ctx)
		cancel()
		if c.err != nil {
			c.logger.Warn("read "+c.what, "error", c.err)
		}
		c.at = time.Now()
	}
	up := 1.0
	if c.err != nil {
		up = 0
	}
	ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, up)
	emit()
}
