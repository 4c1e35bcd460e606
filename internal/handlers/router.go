package handlers

import (
	"github.com/inboxhq/inbox/internal/envelope"
)

// Router picks the handler of an envelope; the worker asks it through
// Resolve. *Registry is the plain one, by (provider, event type); package
// forward decorates one with per-source forwarding routes. cmd/worker
// assembles them from the sources file.
type Router interface {
	// Route returns the handler for env; false means none, and the
	// envelope is to be ignored.
	Route(env *envelope.Envelope) (Handler, bool)
	// Outbound reports whether the handlers of source's envelopes make
	// outbound calls (forwarding): the worker runs those envelopes one per
	// transaction rather than batched, so a slow endpoint holds up no one
	// else's.
	Outbound(source string) bool
}

// Resolve returns the handler the worker runs for env: r's, wrapped in what
// every envelope gets whichever route it took, so it applies to built-in and
// forwarding routes alike, outermost first: Recover (a panic is a failed
// attempt, its stack kept), then ShopifyEventOnce (a Shopify event is
// processed once). false means no handler: the envelope is to be ignored.
func Resolve(r Router, env *envelope.Envelope) (Handler, bool) {
	h, ok := r.Route(env)
	if !ok {
		return nil, false
	}
	return Chain(h, Recover, ShopifyEventOnce), true
}
