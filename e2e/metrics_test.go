package e2e

import (
	"net/http"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"
)

// scrape fetches and parses a /metrics endpoint.
func scrape(t testing.TB, base string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	p := expfmt.NewTextParser(model.UTF8Validation)
	families, err := p.TextToMetricFamilies(resp.Body)
	require.NoError(t, err)
	return families
}

// metricSum adds the values (counter, gauge, or histogram count) of the
// family's series whose labels include every pair in match.
func metricSum(t testing.TB, families map[string]*dto.MetricFamily, name string, match ...string) float64 {
	t.Helper()
	f, ok := families[name]
	require.True(t, ok, "metric %s missing", name)
	var sum float64
	for _, m := range f.GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		ok := true
		for i := 0; i+1 < len(match); i += 2 {
			if labels[match[i]] != match[i+1] {
				ok = false
			}
		}
		if !ok {
			continue
		}
		switch {
		case m.Counter != nil:
			sum += m.GetCounter().GetValue()
		case m.Gauge != nil:
			sum += m.GetGauge().GetValue()
		case m.Histogram != nil:
			sum += float64(m.GetHistogram().GetSampleCount())
		}
	}
	return sum
}

func requireHealthy(t testing.TB, base string) {
	t.Helper()
	for _, path := range []string{"/healthz", "/readyz"} {
		resp, err := http.Get(base + path)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode, path)
	}
	resp, err := http.Get(base + "/riverui/")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusNotFound, resp.StatusCode, "River UI is off unless enabled")
}

func hasPrefix(families map[string]*dto.MetricFamily, prefix string) bool {
	for name := range families {
		if strings.HasPrefix(name, prefix) {
			return true
		}
	}
	return false
}

// series counts the family's series whose labels include every pair in match.
func series(t testing.TB, families map[string]*dto.MetricFamily, name string, match ...string) int {
	t.Helper()
	n := 0
	for _, m := range families[name].GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		ok := true
		for i := 0; i+1 < len(match); i += 2 {
			ok = ok && labels[match[i]] == match[i+1]
		}
		if ok {
			n++
		}
	}
	return n
}
