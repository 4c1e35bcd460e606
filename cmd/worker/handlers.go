package main

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/inboxhq/inbox/examples/customers"
	"github.com/inboxhq/inbox/internal/handlers"
)

// optionalHandlers are the handler packages built into this binary that
// worker run registers only when --handlers names them: the one place a
// fork adds its own (docs/handlers.md). They route events the built-in
// handlers leave ignored, into tables of their own, so none is on by
// default: an event no one wrote a table for stays ignored rather than
// failing.
var optionalHandlers = map[string]func(*handlers.Registry){
	// examples/customers: a Standard Webhooks sender's customer.created
	// and customer.updated into crm_customer (create it first:
	// customers.Schema).
	"customers": customers.Register,
}

// parseHandlers reads --handlers, a comma-separated list of
// optionalHandlers names; an unknown name is an error that lists the
// known ones.
func parseHandlers(list string) ([]string, error) {
	var names []string
	for n := range strings.SplitSeq(list, ",") {
		if n = strings.TrimSpace(n); n == "" {
			continue
		}
		if _, ok := optionalHandlers[n]; !ok {
			known := slices.Sorted(maps.Keys(optionalHandlers))
			return nil, fmt.Errorf("--handlers: unknown handler package %q (built into this binary: %s)", n, strings.Join(known, ", "))
		}
		if !slices.Contains(names, n) {
			names = append(names, n)
		}
	}
	return names, nil
}

// builtinRegistry is the built-in handlers with the optional packages
// names registers on them.
func builtinRegistry(names []string) *handlers.Registry {
	r := handlers.Builtin()
	for _, n := range names {
		optionalHandlers[n](r)
	}
	return r
}
