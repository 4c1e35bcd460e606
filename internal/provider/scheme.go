package provider

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"time"
)

// scheme is one provider as this package knows it. Each provider's own file
// declares its scheme (stripeScheme in stripe.go, ...), and schemes
// registers it: adding a provider is its file, one line in schemes, its
// tests, and a migration admitting its name in envelope.provider (the
// database refuses a name it does not know). Everything else (New, Sign,
// Address, RetryWindow, RedeliveryWindow, Names, configuration, ingest, the
// test kits) reads these.
type scheme struct {
	name string
	// perSource: a scheme each source configures (hmac), not a provider's
	// fixed one; it is not in Names and has no sign or address.
	perSource bool
	// verifier builds the Verifier of a source (New has checked what is
	// common, and set the default tolerance).
	verifier func(Config) (Verifier, error)
	// sign sets the signature headers a sender computes over body at now,
	// with h already holding the delivery's Address headers.
	sign func(secret string, h http.Header, body []byte, now time.Time) error
	// address sets the headers in which a sender names a delivery; nil when
	// the provider carries both its id and its type in the body.
	address func(h http.Header, deliveryID, eventType string)
	// retryWindow: RetryWindow. redeliveryWindow: RedeliveryWindow when
	// longer (a redelivery by hand), else zero.
	retryWindow, redeliveryWindow time.Duration
}

// schemes are the providers this package verifies, in Names' order.
var schemes = []scheme{stripeScheme, githubScheme, shopifyScheme, standardScheme, hmacScheme}

// Names lists every provider with a fixed signing scheme; HMAC, configured
// per source, is not among them.
var Names = fixedNames()

func fixedNames() []string {
	var out []string
	for _, s := range schemes {
		if !s.perSource {
			out = append(out, s.name)
		}
	}
	return out
}

// lookup returns the scheme named name.
func lookup(name string) (scheme, bool) {
	i := slices.IndexFunc(schemes, func(s scheme) bool { return s.name == name })
	if i < 0 {
		return scheme{}, false
	}
	return schemes[i], true
}

// allNames is every scheme's name, for an error message.
func allNames() []string {
	out := make([]string, len(schemes))
	for i, s := range schemes {
		out[i] = s.name
	}
	return out
}

// Address sets on h the headers in which a sender of provider name names a
// delivery: its id and event type where the provider carries them in
// headers (Stripe carries both in the body, Standard Webhooks its type),
// and what else the provider always sends that the inbox reads (Shopify's
// X-Shopify-Event-Id, "ev-<delivery id>" unless h has one). Sign it after.
// For the test kits and tools that act as the sender; it does nothing for
// a name it does not know or a per-source scheme.
func Address(name string, h http.Header, deliveryID, eventType string) {
	if s, ok := lookup(name); ok && s.address != nil {
		s.address(h, deliveryID, eventType)
	}
}

// Sign sets on h the signature headers provider would send with body, signed
// with secret at now, so that a Verifier configured with that secret accepts
// the request. It is meant for tests, demos and tooling; the inbox itself
// only verifies.
//
// It sets, per provider:
//   - stripe: Stripe-Signature "t=<now>,v1=<hex>";
//   - standard: webhook-timestamp and webhook-signature "v1,<base64>". The
//     caller must set webhook-id first (Address), since it is signed;
//   - github: X-Hub-Signature-256 "sha256=<hex>";
//   - shopify: X-Shopify-Hmac-Sha256 "<base64>".
//
// It sets no delivery id or event type header (Address does), and
// replaces any signature already there. Its errors never contain the secret.
func Sign(provider string, secret string, h http.Header, body []byte, now time.Time) error {
	if secret == "" {
		return errors.New("secret is empty")
	}
	s, ok := lookup(provider)
	if !ok || s.sign == nil {
		return fmt.Errorf("%w %q", ErrUnknownProvider, provider)
	}
	return s.sign(secret, h, body, now)
}
