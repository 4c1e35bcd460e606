package metrics_test

// Tests of deploy/: the alert rules (promtool check/test rules) and the
// Grafana dashboard, whose every expression must name metrics the binaries
// export.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/inboxhq/inbox/internal/metrics"
	"github.com/inboxhq/inbox/internal/pgtest"
)

const deployDir = "../../deploy"

// promtool finds promtool, or skips (fails under CI) with how to install it.
func promtool(t *testing.T) string {
	t.Helper()
	return pgtest.Tool(t, "promtool", "run scripts/ensure-tools (as root: apt-get install prometheus) to check the alert rules")
}

func globDeploy(t *testing.T, pattern string) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(deployDir, pattern))
	require.NoError(t, err)
	require.NotEmpty(t, files, "no %s", pattern)
	return files
}

func runPromtool(t *testing.T, bin string, args ...string) {
	t.Helper()
	out, err := exec.Command(bin, args...).CombinedOutput()
	require.NoError(t, err, "promtool %s:\n%s", strings.Join(args, " "), out)
}

// TestRulesPromtool checks the example configuration and the rule files,
// and runs the rules' unit tests.
func TestRulesPromtool(t *testing.T) {
	t.Parallel()
	bin := promtool(t)
	runPromtool(t, bin, "check", "config", filepath.Join(deployDir, "prometheus", "prometheus.yml"))
	runPromtool(t, bin, append([]string{"check", "rules"}, globDeploy(t, "prometheus/rules/*.yml")...)...)
	runPromtool(t, bin, append([]string{"test", "rules"}, globDeploy(t, "prometheus/tests/*.yml")...)...)
}

// TestDashboardExpressionsParse has promtool parse every dashboard
// expression (Grafana's variables replaced) as a recording rule.
func TestDashboardExpressionsParse(t *testing.T) {
	t.Parallel()
	bin := promtool(t)
	type rule struct {
		Record string `yaml:"record"`
		Expr   string `yaml:"expr"`
	}
	var rules []rule
	for i, e := range dashboardExprs(t) {
		e = strings.NewReplacer("$__rate_interval", "5m", "$source", ".*").Replace(e)
		rules = append(rules, rule{Record: fmt.Sprintf("dashboard:expr_%d", i), Expr: e})
	}
	b, err := yaml.Marshal(map[string]any{"groups": []any{map[string]any{"name": "dashboard", "rules": rules}}})
	require.NoError(t, err)
	f := filepath.Join(t.TempDir(), "dashboard.yml")
	require.NoError(t, os.WriteFile(f, b, 0o600))
	runPromtool(t, bin, "check", "rules", f)
}

// TestRulesAlertsAreDocumented: every alert has a for:, a severity, a
// summary and a runbook pointing at a section of docs/operations.md.
func TestRulesAlertsAreDocumented(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../../docs/operations.md")
	require.NoError(t, err)
	anchors := map[string]bool{}
	for _, line := range strings.Split(string(doc), "\n") {
		if strings.HasPrefix(line, "#") {
			anchors[anchor(strings.TrimLeft(line, "# "))] = true
		}
	}
	n := 0
	for _, r := range alertRules(t) {
		if r.Alert == "" {
			continue
		}
		n++
		require.NotEmpty(t, r.For, "%s: for:", r.Alert)
		require.Contains(t, []string{"critical", "warning", "info"}, r.Labels["severity"], "%s: severity", r.Alert)
		require.NotEmpty(t, r.Annotations["summary"], "%s: summary", r.Alert)
		rb, ok := strings.CutPrefix(r.Annotations["runbook"], "docs/operations.md#")
		require.True(t, ok, "%s: runbook %q is not docs/operations.md#...", r.Alert, r.Annotations["runbook"])
		require.True(t, anchors[rb], "%s: docs/operations.md has no section #%s", r.Alert, rb)
	}
	require.GreaterOrEqual(t, n, 8)
}

// anchor is GitHub's heading anchor: lower case, spaces to dashes, other
// punctuation dropped.
func anchor(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(heading)) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9':
			b.WriteRune(r)
		}
	}
	return b.String()
}

type alertRule struct {
	Alert       string            `yaml:"alert"`
	Record      string            `yaml:"record"`
	Expr        string            `yaml:"expr"`
	For         string            `yaml:"for"`
	Labels      map[string]string `yaml:"labels"`
	Annotations map[string]string `yaml:"annotations"`
}

func alertRules(t *testing.T) []alertRule {
	t.Helper()
	var all []alertRule
	for _, f := range globDeploy(t, "prometheus/rules/*.yml") {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		var file struct {
			Groups []struct {
				Rules []alertRule `yaml:"rules"`
			} `yaml:"groups"`
		}
		require.NoError(t, yaml.Unmarshal(b, &file), f)
		for _, g := range file.Groups {
			all = append(all, g.Rules...)
		}
	}
	return all
}

// dashboardExprs returns every PromQL expression of deploy/grafana/*.json:
// panel targets (rows' nested panels too) and query variables.
func dashboardExprs(t *testing.T) []string {
	t.Helper()
	var exprs []string
	for _, f := range globDeploy(t, "grafana/*.json") {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		var d struct {
			Panels     []dashPanel `json:"panels"`
			Templating struct {
				List []struct {
					Type  string          `json:"type"`
					Query json.RawMessage `json:"query"`
				} `json:"list"`
			} `json:"templating"`
		}
		require.NoError(t, json.Unmarshal(b, &d), f)
		var walk func([]dashPanel)
		walk = func(ps []dashPanel) {
			for _, p := range ps {
				// Grafana keys a panel's queries and its overrides by refId:
				// two targets with one refId lose one and restyle the other.
				refIDs := map[string]bool{}
				for _, tg := range p.Targets {
					require.NotEmpty(t, tg.Expr, "%s: panel %q has a target without expr", f, p.Title)
					require.False(t, refIDs[tg.RefID], "%s: panel %q has two targets with refId %q", f, p.Title, tg.RefID)
					refIDs[tg.RefID] = true
					exprs = append(exprs, tg.Expr)
				}
				if p.Type != "row" {
					require.NotEmpty(t, p.Targets, "%s: panel %q has no query", f, p.Title)
				}
				walk(p.Panels)
			}
		}
		walk(d.Panels)
		for _, v := range d.Templating.List {
			if v.Type != "query" {
				continue
			}
			var q struct {
				Query string `json:"query"`
			}
			if json.Unmarshal(v.Query, &q) != nil {
				require.NoError(t, json.Unmarshal(v.Query, &q.Query), "%s: variable query", f)
			}
			// label_values(expr, label): the expression is the metric part.
			if m := regexp.MustCompile(`^label_values\((.*),\s*[a-zA-Z_]\w*\)$`).FindStringSubmatch(q.Query); m != nil {
				q.Query = m[1]
			}
			exprs = append(exprs, q.Query)
		}
	}
	return exprs
}

type dashPanel struct {
	Type    string `json:"type"`
	Title   string `json:"title"`
	Targets []struct {
		Expr  string `json:"expr"`
		RefID string `json:"refId"`
	} `json:"targets"`
	Panels []dashPanel `json:"panels"`
}

// exported gathers the metric names the binaries export: ingest's and the
// worker's registries as cmd/ingest and cmd/worker build them (the worker's
// with a database, for its collectors), histograms with _bucket, _sum and
// _count.
func exported(t *testing.T) map[string]bool {
	t.Helper()
	names := map[string]bool{}
	ingestReg := metrics.NewRegistry()
	im := metrics.NewIngest(ingestReg)
	im.Init([]string{"stripe"})
	im.RegisterInflightBodyBytes(ingestReg, func() int64 { return 0 })
	im.RegisterStoreQueue(ingestReg, metrics.StoreQueue{
		Age: func() time.Duration { return 0 }, Limit: func() time.Duration { return time.Second }, Holds: func() int64 { return 0 }, Surges: func() int64 { return 0 },
		ShedAfter: time.Second, Overload: time.Second, PressureTarget: time.Second,
	})

	pool, err := pgxpool.New(context.Background(), pgtest.NewURL(t))
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	workerReg := metrics.NewRegistry()
	wm := metrics.NewWorker(workerReg, pool, slog.New(slog.NewTextHandler(io.Discard, nil)))
	wm.Init([]string{"stripe"})
	wm.InitRiverKinds("default", "process_envelope")
	metrics.NewBackfill(workerReg).Init([]string{"stripe"})

	for _, fams := range []map[string]*dto.MetricFamily{gather(t, ingestReg), gather(t, workerReg)} {
		for name, mf := range fams {
			names[name] = true
			if mf.GetType() == dto.MetricType_HISTOGRAM {
				for _, suffix := range []string{"_bucket", "_sum", "_count"} {
					names[name+suffix] = true
				}
			}
		}
	}
	return names
}

// TestDashboardMetricsExported: every metric a dashboard or alert
// expression names is exported by ingest or the worker.
func TestDashboardMetricsExported(t *testing.T) {
	t.Parallel()
	have := exported(t)
	check := func(where, expr string) {
		names := metricNames(expr)
		require.NotEmpty(t, names, "%s: no metric in %q", where, expr)
		for _, n := range names {
			require.True(t, have[n], "%s: %q names %s, which neither ingest nor the worker exports", where, expr, n)
		}
	}
	for _, e := range dashboardExprs(t) {
		check("deploy/grafana", e)
	}
	for _, r := range alertRules(t) {
		check("deploy/prometheus/rules "+r.Alert+r.Record, r.Expr)
	}
	// Each metric family this project defines appears on the dashboard.
	var used []string
	for _, e := range dashboardExprs(t) {
		used = append(used, metricNames(e)...)
	}
	var missing []string
	for n := range have {
		if strings.HasPrefix(n, "inbox_") && !strings.HasSuffix(n, "_sum") && !strings.HasSuffix(n, "_count") && !strings.HasSuffix(n, "_bucket") &&
			!slices.ContainsFunc(used, func(u string) bool {
				return u == n || strings.TrimSuffix(strings.TrimSuffix(u, "_bucket"), "_count") == n
			}) {
			missing = append(missing, n)
		}
	}
	sort.Strings(missing)
	require.Empty(t, missing, "exported but on no dashboard panel")
}

// promqlKeywords are PromQL words that are not metric names.
var promqlKeywords = map[string]bool{
	"and": true, "or": true, "unless": true, "bool": true, "offset": true, "inf": true, "nan": true,
	"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true,
	"atan2": true, "start": true, "end": true,
	// Aggregations, which may be followed by by/without before their "(".
	"sum": true, "min": true, "max": true, "avg": true, "group": true, "stddev": true, "stdvar": true,
	"count": true, "count_values": true, "bottomk": true, "topk": true, "quantile": true,
	"limitk": true, "limit_ratio": true,
}

// labelListKeywords are followed by a parenthesised list of label names.
var labelListKeywords = map[string]bool{
	"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true,
}

// metricNames returns the metric names expr selects, by a tokenizer that
// skips strings, label matchers ({...}), ranges ([...]), numbers and
// durations, Grafana variables ($x), functions and aggregations (a word
// before "("), keywords, and the label lists of by/without/on/ignoring/
// group_left/group_right. It does not validate expr (promtool does).
func metricNames(expr string) []string {
	var names []string
	isStart := func(c byte) bool { return c == '_' || c == ':' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }
	isPart := func(c byte) bool { return isStart(c) || c >= '0' && c <= '9' }
	skipTo := func(i int, open, close byte) int { // i at open; returns the index after its close
		depth := 0
		for ; i < len(expr); i++ {
			switch c := expr[i]; {
			case c == '"' || c == '\'' || c == '`':
				i = skipString(expr, i) - 1
			case c == open:
				depth++
			case c == close:
				depth--
				if depth == 0 {
					return i + 1
				}
			}
		}
		return i
	}
	for i := 0; i < len(expr); {
		c := expr[i]
		switch {
		case c == '"' || c == '\'' || c == '`':
			i = skipString(expr, i)
		case c == '{':
			i = skipTo(i, '{', '}')
		case c == '[':
			i = skipTo(i, '[', ']')
		case c == '#': // a comment to the end of the line
			for i < len(expr) && expr[i] != '\n' {
				i++
			}
		case c == '$': // a Grafana variable: $x, ${x}
			i++
			if i < len(expr) && expr[i] == '{' {
				i = skipTo(i, '{', '}')
			}
			for i < len(expr) && isPart(expr[i]) {
				i++
			}
		case c >= '0' && c <= '9' || c == '.': // a number or a duration (5m, 1e3, 0x1f)
			for i < len(expr) && (isPart(expr[i]) || expr[i] == '.') {
				i++
			}
		case isStart(c):
			j := i
			for j < len(expr) && isPart(expr[j]) {
				j++
			}
			word := expr[i:j]
			k := j
			for k < len(expr) && (expr[k] == ' ' || expr[k] == '\t' || expr[k] == '\n') {
				k++
			}
			switch {
			case labelListKeywords[strings.ToLower(word)] && k < len(expr) && expr[k] == '(':
				j = skipTo(k, '(', ')')
			case k < len(expr) && expr[k] == '(': // a function or an aggregation
			case promqlKeywords[strings.ToLower(word)]:
			default:
				names = append(names, word)
			}
			i = j
		default:
			i++
		}
	}
	return names
}

// skipString returns the index after the string literal starting at i.
func skipString(s string, i int) int {
	q := s[i]
	for i++; i < len(s); i++ {
		switch {
		case s[i] == '\\' && q != '`':
			i++
		case s[i] == q:
			return i + 1
		}
	}
	return i
}

func TestDashboardMetricNamesTokenizer(t *testing.T) {
	t.Parallel()
	for expr, want := range map[string][]string{
		`sum by (source, outcome) (rate(a_total{outcome=~"x|y", b="}"}[5m])) / ignoring (outcome) group_left sum by (source) (rate(b_total[$__rate_interval])) > 0.05`: {"a_total", "b_total"},
		`histogram_quantile(0.99, sum by (le) (rate(h_bucket{source=~"$source"}[5m])))`:                                                                                {"h_bucket"},
		`absent(hb) or (time() - max(hb) > 120)`:                                                     {"hb", "hb"},
		`x and on(instance) y unless z offset 5m`:                                                    {"x", "y", "z"},
		`count by (version) (inbox_build_info) * 1e3 + label_replace(m, "dst", "$1", "src", "(.*)")`: {"inbox_build_info", "m"},
		`sum without(instance)(rate(ns:rule:rate5m[1h:5m]))`:                                         {"ns:rule:rate5m"},
		`time()`: nil,
	} {
		require.Equal(t, want, metricNames(expr), expr)
	}
}
