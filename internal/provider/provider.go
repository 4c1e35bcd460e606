// Package provider verifies webhook deliveries from each supported provider
// (Stripe, GitHub, Shopify, Standard Webhooks) and extracts their delivery id
// and event type. It works on the raw body bytes and HTTP headers only: it
// owns no storage and must not import any other package of this module.
package provider

import (
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// Names of the supported providers, as used in configuration and stored in
// envelope.provider.
const (
	Stripe   = "stripe"
	GitHub   = "github"
	Shopify  = "shopify"
	Standard = "standard"
)

// Delivery is what a verified request carries.
type Delivery struct {
	// DeliveryID is the provider's unique id for this delivery; a provider's
	// retry of the same delivery carries the same id.
	DeliveryID string
	// EventType is the provider's event name (GitHub: "event.action" when the
	// body has an action).
	EventType string
	// Payload is the body when it is JSON (always, for these providers).
	Payload json.RawMessage
	// Headers are the headers worth keeping for audit, signature values
	// removed (their presence is kept as "[redacted]"). Keys are in Go's
	// canonical form (http.CanonicalHeaderKey: "X-Github-Delivery",
	// "Webhook-Id"); values are each header's first value.
	Headers map[string]string
	// SignedAt is the provider's signed timestamp, zero when it signs none.
	SignedAt time.Time
	// ReplayDigest is set when the signature does not cover the delivery
	// id (GitHub, Shopify, an hmac source taking the id from a header
	// without {id} in signed_content): sha256 of the event type, a 0 byte
	// and the body. A captured body resent under a new id verifies; the
	// store recognises it by this digest within the source's replay window.
	ReplayDigest []byte
}

// replayDigest is Delivery.ReplayDigest of eventType and body.
func replayDigest(eventType string, body []byte) []byte {
	h := sha256.New()
	h.Write([]byte(eventType))
	h.Write([]byte{0})
	h.Write(body)
	return h.Sum(nil)
}

// Verifier checks one request of one configured source.
type Verifier interface {
	// Verify checks the signature over body (exactly as received) and, only
	// when it holds, parses the delivery. It returns a *SignatureError when
	// the signature is missing, malformed, stale or wrong, and a
	// *FormatError when a verified request lacks a delivery id or its body is
	// not the JSON the provider's format requires.
	Verify(h http.Header, body []byte, now time.Time) (Delivery, error)
}

// Config configures a Verifier.
type Config struct {
	Provider string
	// Secrets are tried in order; any one that matches verifies (rotation).
	Secrets []string
	// Tolerance bounds |now - signed timestamp| for providers that sign one.
	// Zero means DefaultTolerance.
	Tolerance time.Duration
	// HMAC configures provider "hmac" (and only it).
	HMAC *HMACConfig
	// EventType, for provider standard, says where the event type is when
	// the sender does not put it in the body's "type" (a Replicate
	// prediction has none: {json: "status"}). Unset: "type".
	EventType *Field
}

// RedeliveryWindow is how long after a delivery the provider may send it
// again under the same delivery id: its automatic retries (RetryWindow),
// or, for GitHub, which never retries, a redelivery by hand from the hook's
// recent deliveries (kept 3 days). The tombstone window (the worker's
// --purge-delete-after) must be longer, or such a delivery would be stored
// and processed a second time.
func RedeliveryWindow(name string) time.Duration {
	s, _ := lookup(name)
	return max(s.redeliveryWindow, s.retryWindow)
}

// RetryWindow is how long the provider keeps retrying a delivery that was
// not acknowledged, by its documented schedule: Stripe up to 3 days, Shopify
// 4 hours (8 retries, since its September 2024 change; 48 hours before),
// Standard Webhooks senders (Svix's schedule: 5 s, 5 min,
// 30 min, 2 h, 5 h, 10 h, 10 h) about 27.6 hours; GitHub does not retry (0).
// A refund waiting for its payment must wait at least this long, as the
// payment's own delivery may be that late. Unknown providers: 0.
func RetryWindow(name string) time.Duration {
	s, _ := lookup(name)
	return s.retryWindow
}

// DefaultReplayWindow is how long a source remembers the signed bodies of
// deliveries whose id the signature does not cover (config replay_window):
// GitHub lets an operator redeliver the last 3 days of deliveries (with the
// same id, which is a plain duplicate), Shopify retries for 4 hours (48
// before September 2024); 3 days covers both. A captured body resent after
// it is stored again: the residual risk docs/security.md states.
const DefaultReplayWindow = 72 * time.Hour

// DefaultTolerance is the timestamp tolerance when a source sets none; it is
// Stripe's and Standard Webhooks' own default.
const DefaultTolerance = 5 * time.Minute

// SignatureError says why a request's signature was refused. Its message
// never contains a secret, a signature value or an expected value.
type SignatureError struct{ Reason string }

func (e *SignatureError) Error() string { return "signature rejected: " + e.Reason }

// FormatError says why a verified request could not be parsed.
type FormatError struct{ Reason string }

func (e *FormatError) Error() string { return "malformed delivery: " + e.Reason }

// ErrUnknownProvider is returned by New for a provider name it does not know.
var ErrUnknownProvider = errors.New("unknown provider")

// New returns the Verifier for cfg. It fails when the provider is unknown, no
// secret is given, a secret is empty, has leading or trailing white space, or
// (Standard Webhooks) is not base64 after its "whsec_" prefix, or the
// tolerance is negative. Its errors name a secret by its 1-based position,
// never by its value. The Verifier is safe for concurrent use.
func New(cfg Config) (Verifier, error) {
	// Each constructor checks the secrets (rawKeys, or newStandard's own
	// decoding); the tolerance is checked once here.
	if err := checkTolerance(cfg.Tolerance); err != nil {
		return nil, err
	}
	if cfg.Tolerance == 0 {
		cfg.Tolerance = DefaultTolerance
	}
	if cfg.HMAC != nil && cfg.Provider != HMAC {
		return nil, fmt.Errorf("an hmac section is only for provider hmac, not %q", cfg.Provider)
	}
	if cfg.EventType != nil && cfg.Provider != Standard {
		return nil, fmt.Errorf("event_type is only for provider standard (hmac: hmac.event_type), not %q", cfg.Provider)
	}
	s, ok := lookup(cfg.Provider)
	if !ok {
		return nil, fmt.Errorf("%w %q (want one of %s)", ErrUnknownProvider, cfg.Provider, strings.Join(allNames(), ", "))
	}
	return s.verifier(cfg)
}
