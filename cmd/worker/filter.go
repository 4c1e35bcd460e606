package main

import (
	"errors"
	"fmt"
	"strings"

	"github.com/inboxhq/inbox/internal/admin"
	"github.com/inboxhq/inbox/internal/cli"
)

// filterFlags are the selection flags replay and envelopes list share.
type filterFlags struct {
	source, status, eventType, deliveryID, since, until, cause, maxID *string
	contains, fields, headers                                         repeated
}

// repeated is a flag that may be given more than once.
type repeated []string

func (r *repeated) String() string     { return strings.Join(*r, ", ") }
func (r *repeated) Set(v string) error { *r = append(*r, v); return nil }

func addFilterFlags(fs *cli.Flags) *filterFlags {
	ff := &filterFlags{
		source:     fs.String("source", "", "", "only this source"),
		status:     fs.String("status", "", "", "only this status: "+admin.StatusNames()),
		eventType:  fs.String("event-type", "", "", "only this event type"),
		deliveryID: fs.String("delivery-id", "", "", "only this delivery id"),
		since:      fs.String("since", "", "", "received at or after: RFC 3339 time, or a duration meaning that long ago (24h, 90m, 7d)"),
		until:      fs.String("until", "", "", "received before: RFC 3339 time, or a duration meaning that long ago"),
		cause:      fs.String("cause", "", "", "only envelopes whose last failure had this cause (unknown_currency, forward_5xx, ...; see docs/audit.md)"),
		maxID:      fs.String("max-id", "", "", "only envelopes with an id up to this one (a dry run's max_id: what it saw, nothing stored since)"),
	}
	fs.Var(&ff.contains, "contains", "only envelopes whose body contains this `JSON` object, e.g. "+`'{"data":{"merchant_id":"m_1"}}' (repeatable)`)
	fs.Var(&ff.fields, "field", "only envelopes whose body has this `path=value`: data.merchant_id=m_1 (a string), data.amount:=100 (JSON) (repeatable)")
	fs.Var(&ff.headers, "header", "only envelopes with this stored header: `Name=value`, such as X-GitHub-Event=push (name in any case; repeatable)")
	return ff
}

// filter returns the validated Filter of the flags and ids; a wrong flag's
// error names it (--since: ...), as the console names its parameter.
func (ff *filterFlags) filter(ids []string) (admin.Filter, error) {
	f, err := admin.FilterInput{
		IDStrings:  ids,
		Source:     *ff.source,
		Status:     *ff.status,
		EventType:  *ff.eventType,
		DeliveryID: *ff.deliveryID,
		Cause:      *ff.cause,
		MaxID:      *ff.maxID,
		Since:      *ff.since,
		Until:      *ff.until,
		Contains:   ff.contains,
		Fields:     ff.fields,
		Headers:    ff.headers,
	}.Parse()
	if ie := (*admin.InputError)(nil); errors.As(err, &ie) {
		if ie.Field == "id" { // the ids are arguments, not a flag
			return f, ie.Err
		}
		return f, fmt.Errorf("--%w", ie)
	}
	return f, err
}
