package handlers_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"

	"github.com/inboxhq/inbox/internal/envelope"
	"github.com/inboxhq/inbox/internal/handlers"
	"github.com/inboxhq/inbox/internal/provider"
)

// Adding a handler: the built-in registry, one more route for a GitHub event,
// a provider-wide wildcard behind the exact routes, and an event nobody
// handles (the worker marks such an envelope ignored). The worker runs the
// handler it finds inside its transaction and stores what it returns as
// envelope.result; the handler here decodes its event and would write its
// effects through run.Tx (for money, run.Ledger.Post).
func ExampleRegistry() {
	r := handlers.Builtin()
	// GitHub's event type is X-GitHub-Event and the body's action:
	// "release.published", never "release" alone. A route names one event
	// type exactly, or a prefix ending in "*" ("release.*" takes every
	// release action; "*" alone every event of the provider).
	r.Register(provider.GitHub, "release.published", handlers.HandlerFunc(func(_ context.Context, run handlers.Run) (json.RawMessage, error) {
		var body struct {
			Release struct {
				TagName string `json:"tag_name"`
			} `json:"release"`
		}
		// Document: the delivery's JSON as GitHub defines it (the body, or
		// the "payload" field of a form-encoded one), also once retention
		// dropped the body (a replay of an old envelope).
		if err := json.Unmarshal(run.Envelope.Document(), &body); err != nil {
			// Retrying cannot fix a body that does not parse.
			return nil, &handlers.PermanentError{Err: fmt.Errorf("release body: %w", err)}
		}
		return json.Marshal(map[string]string{"released": body.Release.TagName})
	}))

	for _, ev := range []struct{ provider, event string }{
		{provider.GitHub, "release.published"},        // the route just registered
		{provider.GitHub, "issues"},                   // the built-in github wildcard
		{provider.Stripe, "payment_intent.succeeded"}, // a built-in payment handler
		{provider.Stripe, "customer.created"},         // no route: ignored
	} {
		_, ok := r.Lookup(ev.provider, ev.event)
		fmt.Printf("%s %s: handled=%v\n", ev.provider, ev.event, ok)
	}

	h, _ := r.Lookup(provider.GitHub, "release.published")
	res, err := h.Handle(context.Background(), handlers.Run{Envelope: &envelope.Envelope{Provider: provider.GitHub, Body: []byte(`{"release":{"tag_name":"v1.2.0"}}`)}})
	fmt.Println(string(res), err)
	// A webhook configured as application/x-www-form-urlencoded.
	res, err = h.Handle(context.Background(), handlers.Run{Envelope: &envelope.Envelope{Provider: provider.GitHub,
		Headers: map[string]string{"Content-Type": "application/x-www-form-urlencoded"},
		Body:    []byte("payload=" + url.QueryEscape(`{"release":{"tag_name":"v1.1.1"}}`))}})
	fmt.Println(string(res), err)
	// Purged by retention: the body is gone, its parsed copy remains.
	res, err = h.Handle(context.Background(), handlers.Run{Envelope: envelope.Envelope{}.WithBodyPurged([]byte(`{"release":{"tag_name":"v1.1.0"}}`))})
	fmt.Println(string(res), err)
	_, err = h.Handle(context.Background(), handlers.Run{Envelope: &envelope.Envelope{Body: []byte(`not json`)}})
	fmt.Println(err)
	// Output:
	// github release.published: handled=true
	// github issues: handled=true
	// stripe payment_intent.succeeded: handled=true
	// stripe customer.created: handled=false
	// {"released":"v1.2.0"} <nil>
	// {"released":"v1.1.1"} <nil>
	// {"released":"v1.1.0"} <nil>
	// release body: invalid character 'o' in literal null (expecting 'u')
}
