package e2e

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"

	"github.com/inboxhq/inbox/internal/pgtest"
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
	sum, ok := sumOf(families, name, match...)
	require.True(t, ok, "metric %s missing", name)
	return sum
}

// sumOf is metricSum without the test: false if the family is missing.
func sumOf(families map[string]*dto.MetricFamily, name string, match ...string) (float64, bool) {
	f, ok := families[name]
	if !ok {
		return 0, false
	}
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
	return sum, true
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

// want is one expected metric value: the sum of a family's series whose
// labels include every pair in match.
type want struct {
	name  string
	match []string
	value float64
}

// scrapeUntil scrapes base until every expectation holds, for up to 15 s,
// and fails listing the ones that still differ. The processes count after
// they commit (and ingest after it answers), so a scrape taken just after the
// database or the client saw a result can be a moment behind; waiting for the
// exact values keeps each check as strict as an immediate one.
func scrapeUntil(t testing.TB, base string, wants ...want) map[string]*dto.MetricFamily {
	t.Helper()
	var families map[string]*dto.MetricFamily
	pgtest.EventuallyEvery(t, 15*time.Second, 100*time.Millisecond, "the metrics at "+base, func() (bool, string) {
		families = scrape(t, base)
		var diffs []string
		for _, w := range wants {
			got, ok := sumOf(families, w.name, w.match...)
			if !ok {
				diffs = append(diffs, fmt.Sprintf("%s%v missing", w.name, w.match))
			} else if got != w.value {
				diffs = append(diffs, fmt.Sprintf("%s%v = %v, want %v", w.name, w.match, got, w.value))
			}
		}
		return len(diffs) == 0, strings.Join(diffs, "\n")
	})
	return families
}
