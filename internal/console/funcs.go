package console

import (
	"encoding/json"
	"fmt"
	"html/template"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/inboxhq/inbox/internal/cli"
	"github.com/inboxhq/inbox/internal/durations"
	"github.com/inboxhq/inbox/internal/envelope"
)

// bar is one bucket of a cause's attempts chart.
type bar struct {
	X, Y, H int
	Count   int64
	Label   string
}

// Chart geometry (SVG user units).
const (
	chartHeight = 28
	barWidth    = 6
)

func funcs(riverUI string) template.FuncMap {
	// riverJob is job id's page in River UI ("" without River UI).
	riverJob := func(id int64) string {
		if riverUI == "" {
			return ""
		}
		return riverUI + "/jobs/" + strconv.FormatInt(id, 10)
	}
	return template.FuncMap{
		"ts": func(t time.Time) string {
			if t.IsZero() {
				return ""
			}
			return t.UTC().Format("2006-01-02 15:04:05Z")
		},
		"tsp": func(t *time.Time) string {
			if t == nil {
				return ""
			}
			return t.UTC().Format("2006-01-02 15:04:05Z")
		},
		"ago": func(t time.Time) string {
			d := time.Since(t)
			if d < time.Second {
				return "just now"
			}
			return durations.Format(d.Round(time.Second)) + " ago"
		},
		"str": func(s *string) string {
			if s == nil {
				return ""
			}
			return *s
		},
		"ms": func(ms float64) string {
			switch {
			case ms < 1:
				return fmt.Sprintf("%.2f ms", ms)
			case ms < 1000:
				return fmt.Sprintf("%.0f ms", ms)
			default:
				return fmt.Sprintf("%.1f s", ms/1000)
			}
		},
		// count is "1 envelope" or "N envelopes" (cli.Count).
		"count": countOf,
		// perSecond is n over seconds as a rate with one decimal.
		"perSecond":      func(n int64, seconds int) string { return fmt.Sprintf("%.1f", float64(n)/float64(seconds)) },
		"dur":            func(d time.Duration) string { return durations.Format(d) },
		"msOf":           func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 },
		"selection":      selection,
		"recordedFilter": recordedFilter,
		"short": func(s string) string {
			const n = 140
			if utf8.RuneCountInString(s) <= n {
				return s
			}
			r := []rune(s)
			return string(r[:n]) + "…"
		},
		// riverJob is River UI's page of a job, "" when River UI is not served.
		"riverJob": riverJob,
		// liveJob returns riverJob(id) when id is one of jobs (still in
		// river_job), "" otherwise: a finished envelope's job is deleted
		// with its last attempt, and River UI has no page for it.
		"liveJob": func(jobs []envelope.Job, id int64) string {
			for _, j := range jobs {
				if j.ID == id {
					return riverJob(id)
				}
			}
			return ""
		},
		// set returns query q (encoded) with each key set to its value.
		"set": func(q template.URL, kv ...string) template.URL {
			v, _ := url.ParseQuery(string(q))
			for i := 0; i+1 < len(kv); i += 2 {
				v.Set(kv[i], kv[i+1])
			}
			return template.URL(v.Encode())
		},
		"has": func(v url.Values, key, value string) bool {
			for _, x := range v[key] {
				if x == value {
					return true
				}
			}
			return false
		},
		"joined": func(v url.Values, key string) string { return strings.Join(v[key], "\n") },
		"bars": func(c envelope.CauseCount, top int64) []bar {
			out := make([]bar, len(c.Attempts))
			for i, n := range c.Attempts {
				h := 0
				if top > 0 && n > 0 {
					h = max(1, int(n*chartHeight/top))
				}
				out[i] = bar{X: i * barWidth, Y: chartHeight - h, H: h, Count: n}
			}
			return out
		},
		"chartWidth": func(c envelope.CauseCount) int { return len(c.Attempts) * barWidth },
		"bucketStart": func(since time.Time, bucket time.Duration, i int) string {
			return since.Add(time.Duration(i) * bucket).UTC().Format("Jan 2 15:04")
		},
		"statusClass": func(s envelope.Status) string { return "st-" + string(s) },
		"add":         func(a, b int) int { return a + b },
	}
}

// selection says a filter query in words, each field once: "status failed ·
// cause unknown_currency · since 24h" ("every envelope" when empty).
func selection(q url.Values) string {
	if len(q) == 0 {
		return "every envelope"
	}
	keys := make([]string, 0, len(q))
	for k := range q {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		v := strings.Join(q[k], ", ")
		if (k == "since" || k == "until") && !strings.Contains(v, "T") {
			v += " ago" // a duration: that long ago
		}
		parts = append(parts, strings.ReplaceAll(k, "_", " ")+" "+v)
	}
	return strings.Join(parts, " · ")
}

// recordedFilter says an envelope_replay.filter (a JSON object) in words as
// selection does; the JSON as stored when it is not an object.
func recordedFilter(raw json.RawMessage) string {
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil || m == nil {
		return string(raw)
	}
	q := url.Values{}
	for k, v := range m {
		switch v := v.(type) {
		case string:
			q.Set(k, v)
		default:
			b, _ := json.Marshal(v)
			q.Set(k, string(b))
		}
	}
	return selection(q)
}

// countOf is the template's count: "1 envelope" or "N envelopes", for the
// integer kinds the page data holds.
func countOf(n any, one, many string) (string, error) {
	switch v := n.(type) {
	case int:
		return cli.Count(v, one, many), nil
	case int64:
		return cli.Count(v, one, many), nil
	}
	return "", fmt.Errorf("count: %T is not an int or int64", n)
}
