package forward

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"sync"

	"github.com/inboxhq/inbox/internal/envelope"
	"github.com/inboxhq/inbox/internal/handlers"
	"github.com/inboxhq/inbox/internal/provider"
)

// Router is the handlers.Router that adds per-source routes (forwarding) to
// another Router, next: it decorates next, and routes an envelope to next
// alone when no route of its source matches. It is safe for concurrent use;
// it sees handlers registered on next after it was made.
type Router struct {
	next handlers.Router

	mu sync.RWMutex
	// routes holds each source's routes, in registration order.
	routes map[string][]route
}

// route is one handler of a source, for the event types matching any of
// its patterns (all of them when there are none).
type route struct {
	events  []string
	instead bool
	handler handlers.Handler
}

func (rt route) matches(eventType string) bool {
	if len(rt.events) == 0 {
		return true
	}
	for _, p := range rt.events {
		if provider.MatchEvent(p, eventType) {
			return true
		}
	}
	return false
}

// New returns a Router with no routes of its own over next. It panics on a
// nil next, a programming error.
func New(next handlers.Router) *Router {
	if next == nil {
		panic("forward: New needs a Router to decorate")
	}
	return &Router{next: next, routes: make(map[string][]route)}
}

// FromSources returns a Router over next with, for each source of sources
// (in name order), a route per destination in its order: a Handler using
// client (see NewHandler), for the destination's Events, in its Mode. Its
// errors name the source and the destination's index, never its secret.
// config.Config.Destinations gives sources from the sources file.
func FromSources(next handlers.Router, sources map[string][]*Destination, client *http.Client) (*Router, error) {
	r := New(next)
	for _, name := range slices.Sorted(maps.Keys(sources)) {
		for i, dest := range sources[name] {
			h, err := NewHandler(dest, client)
			if err != nil {
				return nil, fmt.Errorf("source %q: forward[%d]: %w", name, i, err)
			}
			r.Add(name, h.dest.Events, h.dest.Mode, h)
		}
	}
	return r, nil
}

// Add routes source's envelopes whose event type matches any of events
// (every event type when events is empty) to h, besides or instead of next's
// handler by mode (Besides, the default when empty, or Instead); see
// Route. Patterns are exact event types or a
// prefix with a trailing "*" ("payment.*"). Routes of one source run in the
// order they were added. It panics on an empty source, an invalid pattern,
// an unknown mode or a nil handler, which are programming errors.
func (r *Router) Add(source string, events []string, mode Mode, h handlers.Handler) {
	if source == "" || h == nil || (mode != "" && mode != Besides && mode != Instead) {
		panic("forward: Add needs a source, a mode and a handler")
	}
	for _, p := range events {
		if err := provider.CheckEventPattern(p); err != nil {
			panic("forward: Add: " + err.Error())
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.routes[source] = append(r.routes[source], route{events: append([]string(nil), events...), instead: mode == Instead, handler: h})
}

// Route implements handlers.Router. When routes of env.Source match
// env.EventType, it returns a handler that runs, unless one of them is in
// mode instead, next's handler for env if there is one, and then the
// matching routes in order. All run in the same call and transaction; it
// stops at the first error and returns it, so the attempt rolls back as a
// whole (ledger postings included) and is retried: a failing built-in
// handler means no route runs, a failing route undoes the built-in
// handler's effects. Its result is next's handler's JSON object with the
// routes' results added as an array under "forwarded" (or
// {"forwarded": [...], "result": ...} when that result is not an object or
// already has the key). When no route matches it is next.Route(env).
func (r *Router) Route(env *envelope.Envelope) (handlers.Handler, bool) {
	r.mu.RLock()
	var matched []handlers.Handler
	instead := false
	for _, rt := range r.routes[env.Source] {
		if rt.matches(env.EventType) {
			matched = append(matched, rt.handler)
			instead = instead || rt.instead
		}
	}
	r.mu.RUnlock()
	if len(matched) == 0 {
		return r.next.Route(env)
	}
	c := &combined{routes: matched}
	if !instead {
		c.builtin, _ = r.next.Route(env)
	}
	return c, true
}

// Outbound implements handlers.Router: true for a source with routes of
// its own (their handlers make outbound calls), else what next says.
func (r *Router) Outbound(source string) bool {
	r.mu.RLock()
	n := len(r.routes[source])
	r.mu.RUnlock()
	return n > 0 || r.next.Outbound(source)
}

// combined runs next's handler, then a source's matching routes.
type combined struct {
	builtin handlers.Handler // nil: none, or mode instead
	routes  []handlers.Handler
}

func (c *combined) Handle(ctx context.Context, run handlers.Run) (json.RawMessage, error) {
	var res json.RawMessage
	if c.builtin != nil {
		var err error
		if res, err = c.builtin.Handle(ctx, run); err != nil {
			return nil, err
		}
	}
	forwarded := make([]json.RawMessage, 0, len(c.routes))
	for _, h := range c.routes {
		fres, err := h.Handle(ctx, run)
		if err != nil {
			return nil, err
		}
		if len(fres) == 0 {
			fres = json.RawMessage("null")
		}
		forwarded = append(forwarded, fres)
	}
	return mergeForwarded(forwarded, res)
}

// mergeForwarded adds forwarded under "forwarded" to result, a JSON object,
// so that queries on the built-in handler's result keep working.
func mergeForwarded(forwarded []json.RawMessage, result json.RawMessage) (json.RawMessage, error) {
	fw, err := json.Marshal(forwarded)
	if err != nil {
		return nil, fmt.Errorf("encode result: %w", err)
	}
	if len(bytes.TrimSpace(result)) == 0 {
		return handlers.EncodeResult(map[string]json.RawMessage{"forwarded": fw})
	}
	var obj map[string]json.RawMessage
	if json.Unmarshal(result, &obj) == nil && obj != nil {
		if _, taken := obj["forwarded"]; !taken {
			obj["forwarded"] = fw
			return handlers.EncodeResult(obj)
		}
	}
	return handlers.EncodeResult(map[string]json.RawMessage{"forwarded": fw, "result": result})
}
