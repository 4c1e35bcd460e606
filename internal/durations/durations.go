// Package durations parses and prints durations the way an operator writes
// them: Go's units (90s, 15m, 36h) plus days (7d, 1d12h). Every duration a
// flag, an environment variable or a filter takes goes through Parse, and
// every default shown goes through Format, so `--since 7d` and
// `--body-after 30d` read alike and a default of 720h prints as 30d.
//
// It imports nothing of this module.
package durations

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"
)

const day = 24 * time.Hour

// maxDays bounds the days part, far below time.Duration's ~106,000 days.
const maxDays = 100000

var daysRE = regexp.MustCompile(`^(\d+)d(.*)$`)

// Parse reads a duration: anything time.ParseDuration accepts, or a number
// of days followed by such a duration ("7d", "1d12h", "2d30m").
func Parse(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	m := daysRE.FindStringSubmatch(s)
	if m == nil {
		d, err := time.ParseDuration(s)
		if err != nil {
			return 0, fmt.Errorf("%q is not a duration (e.g. 30s, 15m, 24h, 7d)", s)
		}
		return d, nil
	}
	days, err := strconv.Atoi(m[1])
	if err != nil || days > maxDays {
		return 0, fmt.Errorf("%q: a duration of at most %d days", s, maxDays)
	}
	d := time.Duration(days) * day
	if m[2] != "" {
		rest, err := time.ParseDuration(m[2])
		if err != nil || rest < 0 || strings.HasPrefix(m[2], "+") {
			return 0, fmt.Errorf("%q is not a duration (after the days, e.g. 1d12h)", s)
		}
		d += rest
	}
	return d, nil
}

// Format prints d as Parse reads it, in whole days where it has them and
// without Go's trailing zero units: 720h is "30d", 36h "1d12h", 90s "1m30s",
// 20ms "20ms".
func Format(d time.Duration) string {
	if d == 0 {
		return "0s"
	}
	sign := ""
	if d < 0 {
		if d == -d { // the most negative duration has no positive twin
			return d.String()
		}
		sign, d = "-", -d
	}
	var b strings.Builder
	b.WriteString(sign)
	if days := d / day; days > 0 {
		b.WriteString(strconv.FormatInt(int64(days), 10) + "d")
		d -= days * day
		if d == 0 {
			return b.String()
		}
	}
	s := d.String()
	// 1h0m0s -> 1h, 1m0s -> 1m, 2h30m0s -> 2h30m.
	for strings.HasSuffix(s, "m0s") || strings.HasSuffix(s, "h0m") {
		s = s[:len(s)-2]
	}
	b.WriteString(s)
	return b.String()
}

// Value is a flag.Value for a duration read by Parse and shown by Format.
type Value time.Duration

// Set implements flag.Value.
func (v *Value) Set(s string) error {
	d, err := Parse(s)
	if err != nil {
		return errors.New(strings.TrimPrefix(err.Error(), strconv.Quote(s)+" "))
	}
	*v = Value(d)
	return nil
}

// String implements flag.Value.
func (v *Value) String() string { return Format(time.Duration(*v)) }
