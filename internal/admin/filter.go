package admin

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/inboxhq/inbox/internal/durations"
	"github.com/inboxhq/inbox/internal/envelope"
)

// Filter selects envelopes; Replay, DryRun and List share it. Zero fields
// select everything; set fields combine with AND. IDs select exactly those
// envelopes and cannot be combined with the other fields.
type Filter struct {
	IDs        []int64
	Source     string
	Status     envelope.Status
	EventType  string
	DeliveryID string
	// Cause selects envelopes whose last failure had this code
	// (envelope.last_cause; internal/handlers lists them): failed envelopes,
	// and pending ones waiting to retry.
	Cause string
	// Contains selects envelopes whose parsed body contains each of these
	// JSON documents (jsonb @>: {"data":{"merchant_id":"m_1"}} matches any
	// body with that key at that place, whatever else it holds). An
	// envelope whose body is not JSON, or was purged with its payload,
	// matches none. ParseField builds one from data.merchant_id=m_1.
	Contains []json.RawMessage
	// Headers selects envelopes whose stored headers have these exact
	// values; names match in any case. Only the headers ingest keeps are
	// stored (see internal/provider), and signature values are stored as
	// "[redacted]".
	Headers map[string]string
	// Since and Until bound received_at: Since inclusive, Until exclusive.
	Since Bound
	Until Bound
	// Within, when set, keeps only these envelopes of what the other fields
	// select: the ones a dry run would replay (DryRunResult.ReplayIDs), so
	// that the confirmed replay takes exactly those, whatever changed since.
	// Unlike IDs it combines with the other fields, and the audit record
	// keeps the filter (and the count of pinned ids, not the ids: the
	// replayed envelopes' rows are the list). Alone it selects nothing
	// (IsEmpty ignores it).
	Within []int64
	// MaxID, when not 0, keeps only envelopes with an id up to it: the
	// selection as a dry run saw it (DryRunResult.MaxID), without envelopes
	// stored since. It narrows the other fields; alone it selects nothing
	// (IsEmpty ignores it).
	MaxID int64

	// replayable limits the selection to envelopes that can be processed
	// again: those whose body (or parsed payload) retention has not dropped.
	replayable bool
}

// Bound is a point in time, either absolute (At) or an age (Ago: that long
// before the database's now()). The zero Bound is no bound.
type Bound struct {
	At  time.Time
	Ago time.Duration
}

// IsZero reports whether b bounds nothing.
func (b Bound) IsZero() bool { return b.At.IsZero() && b.Ago == 0 }

// Time returns the bound's instant given the database's now.
func (b Bound) Time(now time.Time) time.Time {
	if b.Ago != 0 {
		return now.Add(-b.Ago)
	}
	return b.At
}

// String returns the bound as given: an RFC 3339 time or "24h0m0s ago".
func (b Bound) String() string {
	switch {
	case b.IsZero():
		return ""
	case b.Ago != 0:
		return durations.Format(b.Ago) + " ago"
	default:
		return b.At.Format(time.RFC3339Nano)
	}
}

// ParseBound parses an RFC 3339 time (2026-01-02T15:04:05Z) or a positive
// duration meaning "that long ago": Go's syntax (90m, 24h) plus whole days
// (7d, 1d12h). An empty string is the zero Bound.
func ParseBound(s string) (Bound, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return Bound{}, nil
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return Bound{At: t}, nil
	}
	d, err := durations.Parse(s)
	if err != nil {
		return Bound{}, fmt.Errorf("%q is neither an RFC 3339 time (2026-01-02T15:04:05Z) nor a duration (90m, 24h, 7d)", s)
	}
	if d <= 0 {
		return Bound{}, fmt.Errorf("%q: a duration means that long ago and must be positive", s)
	}
	return Bound{Ago: d}, nil
}

// IsEmpty reports whether f selects every envelope.
func (f Filter) IsEmpty() bool {
	return len(f.IDs) == 0 && f.Source == "" && f.Status == "" && f.EventType == "" &&
		f.DeliveryID == "" && f.Cause == "" && len(f.Contains) == 0 && len(f.Headers) == 0 &&
		f.Since.IsZero() && f.Until.IsZero()
}

// NarrowsBeyondStatus reports whether f selects by something other than
// the status: a resolve needs that (every failed envelope at once is not
// one operator decision).
func (f Filter) NarrowsBeyondStatus() bool {
	g := f
	g.Status = ""
	return !g.IsEmpty()
}

func (f Filter) hasFields() bool {
	g := f
	g.IDs = nil
	return !g.IsEmpty()
}

// Validate checks f: a known status, positive ids not combined with other
// fields, and Since before Until when both are absolute.
func (f Filter) Validate() error {
	if len(f.IDs) > 0 && f.hasFields() {
		return errors.New("select envelopes either by id or by filter flags, not both")
	}
	for _, id := range f.IDs {
		if id <= 0 {
			return notID(strconv.FormatInt(id, 10))
		}
	}
	if len(f.IDs) > MaxIDs {
		return fmt.Errorf("%d envelope ids: at most %d at once (select the rest with a filter, or in several runs)", len(f.IDs), MaxIDs)
	}
	if f.MaxID < 0 {
		return fmt.Errorf("max id %d: must not be negative", f.MaxID)
	}
	if len(f.Within) > MaxIDs {
		return fmt.Errorf("%d pinned ids: at most %d", len(f.Within), MaxIDs)
	}
	for _, id := range f.Within {
		if id <= 0 {
			return fmt.Errorf("pinned envelope id %d: must be positive", id)
		}
	}
	if f.Status != "" && !slices.Contains(envelope.Statuses(), f.Status) {
		return fmt.Errorf("status %q: want %s", f.Status, StatusNames())
	}
	if f.Cause != "" && !causePattern.MatchString(f.Cause) {
		return fmt.Errorf("cause %q: want a code such as unknown_currency (lowercase letters, digits, _)", f.Cause)
	}
	for _, c := range f.Contains {
		if err := checkContainment(c); err != nil {
			return err
		}
	}
	for k := range f.Headers {
		if k == "" || strings.ContainsAny(k, " \t\r\n:") {
			return fmt.Errorf("header name %q: want a name such as X-GitHub-Event", k)
		}
	}
	if f.Since.Ago < 0 || f.Until.Ago < 0 {
		return errors.New("a relative time must be positive (how long ago)")
	}
	// Bounds of one kind compare as given; an absolute and a relative one on
	// this process's clock.
	bad := false
	switch {
	case !f.Since.At.IsZero() && !f.Until.At.IsZero():
		bad = !f.Since.At.Before(f.Until.At)
	case f.Since.Ago != 0 && f.Until.Ago != 0:
		bad = f.Since.Ago <= f.Until.Ago
	case !f.Since.IsZero() && !f.Until.IsZero():
		// One absolute, one relative: compared on this clock (the
		// database's is seconds away at most, and an empty window would
		// only match nothing).
		now := time.Now()
		bad = !f.Since.Time(now).Before(f.Until.Time(now))
	}
	if bad {
		return fmt.Errorf("since (%s) must be before until (%s)", f.Since, f.Until)
	}
	return nil
}

// Where returns f as a parameterized SQL condition on the envelope table
// (columns unqualified) and its arguments, numbered from $1; values never
// enter the SQL text. Relative bounds resolve against the clock, which
// should be the database's (envelope.ReadClock). An empty filter returns "TRUE".
func (f Filter) Where(clock envelope.Clock) (string, []any) {
	return f.selection(clock).Where()
}

// selection is f as envelope's store selects it, its relative bounds
// resolved against the clock.
func (f Filter) selection(clock envelope.Clock) envelope.Selection {
	now := clock.Now
	s := envelope.Selection{IDs: f.IDs, Source: f.Source, Status: f.Status, EventType: f.EventType,
		DeliveryID: f.DeliveryID, Cause: f.Cause, Contains: f.Contains, Headers: f.Headers, Replayable: f.replayable, MaxID: f.MaxID,
		LegacyUntil: clock.LegacyUntil}
	if f.replayable && f.Status == "" {
		// A replay leaves resolved envelopes alone: an operator closed
		// them, and re-running their handler could repeat what was done
		// by hand. Asked for by status or id, it is an error instead.
		s.NotStatus = envelope.StatusResolved
	}
	if !f.Since.IsZero() {
		s.Since = f.Since.Time(now)
	}
	if !f.Until.IsZero() {
		s.Until = f.Until.Time(now)
	}
	if len(f.Within) > 0 {
		s.IDs = intersect(f.IDs, f.Within)
		if len(s.IDs) == 0 {
			s.IDs = []int64{0} // no id is 0: nothing matches
		}
	}
	return s
}

// intersect returns the ids of within that ids holds too, or all of within
// when ids is empty.
func intersect(ids, within []int64) []int64 {
	if len(ids) == 0 {
		return within
	}
	var out []int64
	for _, id := range within {
		if slices.Contains(ids, id) {
			out = append(out, id)
		}
	}
	return out
}

// record is the filter as stored in envelope_replay.filter: relative bounds
// resolved to the instants the command used.
func (f Filter) record(now time.Time, limit int) map[string]any {
	m := map[string]any{}
	if len(f.IDs) > 0 {
		m["ids"] = f.IDs
	}
	if len(f.Contains) > 0 {
		m["contains"] = f.Contains
	}
	if len(f.Headers) > 0 {
		m["headers"] = canonicalMap(f.Headers)
	}
	for k, v := range map[string]string{"source": f.Source, "status": string(f.Status), "event_type": f.EventType, "delivery_id": f.DeliveryID, "cause": f.Cause} {
		if v != "" {
			m[k] = v
		}
	}
	for k, b := range map[string]Bound{"since": f.Since, "until": f.Until} {
		if b.IsZero() {
			continue
		}
		m[k] = b.Time(now).UTC().Format(time.RFC3339Nano)
		if b.Ago != 0 {
			m[k+"_ago"] = b.Ago.String()
		}
	}
	if f.MaxID > 0 {
		m["max_id"] = f.MaxID
	}
	if len(f.Within) > 0 {
		m["pinned_ids"] = len(f.Within)
	}
	if limit > 0 {
		m["limit"] = limit
	}
	return m
}

// dedupe returns ids sorted without repeats.
func dedupe(ids []int64) []int64 {
	out := slices.Clone(ids)
	slices.Sort(out)
	return slices.Compact(out)
}

// StatusNames lists envelope.Statuses() as a sentence does: "pending,
// done, failed or ignored".
func StatusNames() string {
	st := envelope.Statuses()
	names := make([]string, len(st))
	for i, s := range st {
		names[i] = string(s)
	}
	if len(names) < 2 {
		return strings.Join(names, "")
	}
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}

// MaxIDs bounds how many ids one Filter may name: each replayed envelope's
// audit row records the filter, ids included.
const MaxIDs = 1000

var causePattern = regexp.MustCompile(`^[a-z0-9_]{1,64}$`)

// checkContainment accepts a JSON object: what Filter.Contains matches
// bodies against.
func checkContainment(c json.RawMessage) error {
	var v any
	if err := json.Unmarshal(c, &v); err != nil {
		return fmt.Errorf("contains %s: not JSON: %v", short(c), err)
	}
	if _, ok := v.(map[string]any); !ok {
		return fmt.Errorf("contains %s: want a JSON object, such as {\"data\":{\"merchant_id\":\"m_1\"}}", short(c))
	}
	return nil
}

func short(b []byte) string {
	const max = 80
	if len(b) > max {
		return string(b[:max]) + "..."
	}
	return string(b)
}

// canonicalMap keys h by canonical header name, as ingest stores them.
func canonicalMap(h map[string]string) map[string]string {
	out := make(map[string]string, len(h))
	for k, v := range h {
		out[http.CanonicalHeaderKey(k)] = v
	}
	return out
}

// ParseField turns path=value into the containment document Contains
// takes: data.merchant_id=m_1 is {"data":{"merchant_id":"m_1"}}. The value
// is a string; path:=value takes it as JSON instead (data.amount:=100,
// livemode:=false). Path segments are object keys split at dots: for a key
// with a dot in it, or an array element, write the document itself.
func ParseField(s string) (json.RawMessage, error) {
	eq := strings.IndexByte(s, '=')
	if eq <= 0 {
		return nil, fmt.Errorf("field %q: want path=value, such as data.merchant_id=m_1", s)
	}
	path, value := s[:eq], s[eq+1:]
	var v any = value
	if strings.HasSuffix(path, ":") {
		path = strings.TrimSuffix(path, ":")
		d := json.NewDecoder(bytes.NewReader([]byte(value)))
		d.UseNumber()
		var raw any
		if err := d.Decode(&raw); err != nil || d.More() {
			return nil, fmt.Errorf("field %q: the value after := must be JSON (100, false, \"text\", {...})", s)
		}
		v = raw
	}
	keys := strings.Split(path, ".")
	for i := len(keys) - 1; i >= 0; i-- {
		if keys[i] == "" {
			return nil, fmt.Errorf("field %q: empty key in path %q", s, path)
		}
		v = map[string]any{keys[i]: v}
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("field %q: %w", s, err)
	}
	return b, nil
}
