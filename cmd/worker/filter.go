package main

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/inboxhq/inbox/internal/admin"
	"github.com/inboxhq/inbox/internal/cli"
	"github.com/inboxhq/inbox/internal/envelope"
	"github.com/inboxhq/inbox/internal/labels"
)

// filterFlags are the selection flags replay and envelopes list share.
type filterFlags struct {
	source, status, eventType, deliveryID, since, until, cause *string
	contains, fields, headers                                  repeated
}

// repeated is a flag that may be given more than once.
type repeated []string

func (r *repeated) String() string     { return strings.Join(*r, ", ") }
func (r *repeated) Set(v string) error { *r = append(*r, v); return nil }

func addFilterFlags(fs *cli.Flags) *filterFlags {
	ff := &filterFlags{
		source:     fs.String("source", "", "", "only this source"),
		status:     fs.String("status", "", "", "only this status: pending, done, failed or ignored"),
		eventType:  fs.String("event-type", "", "", "only this event type"),
		deliveryID: fs.String("delivery-id", "", "", "only this delivery id"),
		since:      fs.String("since", "", "", "received at or after: RFC 3339 time, or a duration meaning that long ago (24h, 90m, 7d)"),
		until:      fs.String("until", "", "", "received before: RFC 3339 time, or a duration meaning that long ago"),
		cause:      fs.String("cause", "", "", "only envelopes whose last failure had this cause (unknown_currency, forward_5xx, ...; see docs/audit.md)"),
	}
	fs.Var(&ff.contains, "contains", "only envelopes whose body contains this `JSON` object, e.g. "+`'{"data":{"merchant_id":"m_1"}}' (repeatable)`)
	fs.Var(&ff.fields, "field", "only envelopes whose body has this `path=value`: data.merchant_id=m_1 (a string), data.amount:=100 (JSON) (repeatable)")
	fs.Var(&ff.headers, "header", "only envelopes with this stored header: `Name=value`, such as X-GitHub-Event=push (name in any case; repeatable)")
	return ff
}

// filter returns the Filter of the flags and ids. It parses the flags'
// strings; checking the Filter is its request's Validate (admin.ListRequest,
// admin.ReplayRequest). A --cause must be one this build records
// (labels.Causes), which is stricter than Validate's well-formed code.
func (ff *filterFlags) filter(ids []int64) (admin.Filter, error) {
	f := admin.Filter{
		IDs:        ids,
		Source:     *ff.source,
		Status:     envelope.Status(*ff.status),
		EventType:  *ff.eventType,
		DeliveryID: *ff.deliveryID,
		Cause:      *ff.cause,
	}
	if f.Cause != "" && !labels.KnownCause(labels.Cause(f.Cause)) {
		return f, fmt.Errorf("--cause %q: want one of %s", f.Cause, causeList())
	}
	for _, c := range ff.contains {
		f.Contains = append(f.Contains, json.RawMessage(c)) // Validate says if it is not a JSON object
	}
	for _, fl := range ff.fields {
		c, err := admin.ParseField(fl)
		if err != nil {
			return f, fmt.Errorf("--field: %w", err)
		}
		f.Contains = append(f.Contains, c)
	}
	for _, h := range ff.headers {
		name, value, ok := strings.Cut(h, "=")
		if !ok || strings.TrimSpace(name) == "" {
			return f, fmt.Errorf("--header %q: want Name=value, such as X-GitHub-Event=push", h)
		}
		if f.Headers == nil {
			f.Headers = map[string]string{}
		}
		f.Headers[strings.TrimSpace(name)] = value
	}
	var err error
	if f.Since, err = admin.ParseBound(*ff.since); err != nil {
		return f, fmt.Errorf("--since: %w", err)
	}
	if f.Until, err = admin.ParseBound(*ff.until); err != nil {
		return f, fmt.Errorf("--until: %w", err)
	}
	return f, nil // the request's Validate checks it, with the rest
}

// parseIDs reads envelope ids, positive integers.
func parseIDs(args []string) ([]int64, error) {
	ids := make([]int64, 0, len(args))
	for _, a := range args {
		id, err := strconv.ParseInt(a, 10, 64)
		if err != nil || id <= 0 {
			return nil, fmt.Errorf("%q is not an envelope id (a positive integer)", a)
		}
		ids = append(ids, id)
	}
	return ids, nil
}

// causeList is the known causes, comma-separated.
func causeList() string {
	names := make([]string, len(labels.Causes))
	for i, c := range labels.Causes {
		names[i] = string(c)
	}
	return strings.Join(names, ", ")
}
