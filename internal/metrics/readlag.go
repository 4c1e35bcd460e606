package metrics

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// readLagTimeout bounds the lag query of one scrape.
const readLagTimeout = 2 * time.Second

var (
	readLagDesc = prometheus.NewDesc("inbox_console_read_lag_seconds",
		"How far behind its primary the hot standby the console reads is (--console-read-database-url): 0 when it has replayed all it received.", nil, nil)
	readLagUpDesc = prometheus.NewDesc("inbox_console_read_lag_up",
		"1 when the console's standby answered the lag query of this scrape, 0 when it did not (inbox_console_read_lag_seconds is then absent).", nil, nil)
)

// readLag collects the lag at each scrape.
type readLag struct {
	lag func(context.Context) (time.Duration, error)
}

func (r readLag) Describe(ch chan<- *prometheus.Desc) { ch <- readLagDesc; ch <- readLagUpDesc }

func (r readLag) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), readLagTimeout)
	defer cancel()
	d, err := r.lag(ctx)
	if err != nil {
		ch <- prometheus.MustNewConstMetric(readLagUpDesc, prometheus.GaugeValue, 0)
		return
	}
	ch <- prometheus.MustNewConstMetric(readLagUpDesc, prometheus.GaugeValue, 1)
	ch <- prometheus.MustNewConstMetric(readLagDesc, prometheus.GaugeValue, d.Seconds())
}

// RegisterReadLag exports inbox_console_read_lag_seconds (and _up), read
// with lag at each scrape. Call it once, when the console reads a standby.
func RegisterReadLag(reg prometheus.Registerer, lag func(context.Context) (time.Duration, error)) {
	reg.MustRegister(readLag{lag: lag})
}
