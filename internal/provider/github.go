package provider

import (
	"encoding/hex"
	"net/http"
	"strings"
	"time"
)

// GitHub's headers.
const (
	githubSignatureHeader     = "X-Hub-Signature-256"
	githubSHA1SignatureHeader = "X-Hub-Signature"
	githubDeliveryHeader      = "X-GitHub-Delivery"
	githubEventHeader         = "X-GitHub-Event"
)

var githubKeep = []string{
	githubDeliveryHeader,
	githubEventHeader,
	"X-GitHub-Hook-ID",
	"X-GitHub-Hook-Installation-Target-Type",
	"X-GitHub-Hook-Installation-Target-ID",
}

// githubVerifier verifies GitHub webhooks: X-Hub-Signature-256
// "sha256=<hex>", HMAC-SHA256 of the body keyed by the secret. GitHub signs
// no timestamp, so the delivery id is the only replay defence. It is safe
// for concurrent use.
type githubVerifier struct {
	keys [][]byte
}

func newGitHub(cfg Config) (Verifier, error) {
	keys, err := rawKeys(cfg.Secrets)
	if err != nil {
		return nil, err
	}
	return &githubVerifier{keys: keys}, nil
}

// Verify implements Verifier. The SHA-1 X-Hub-Signature is never accepted.
// The signature is over the raw body whatever its content type. Any
// verified body is stored; the parsed Payload is the body when it is JSON,
// and for a webhook configured with the application/x-www-form-urlencoded
// content type (GitHub's API default) the JSON in its "payload" form field,
// as go-github's ValidatePayload returns it; nil when neither is JSON. The
// delivery id is X-GitHub-Delivery (the same on a redelivery) and the event
// type X-GitHub-Event, followed by "." and the payload's "action" when it is
// an object with a non-empty string action ("pull_request.opened"); empty
// when the header is missing. Neither header is covered by the signature.
func (v *githubVerifier) Verify(h http.Header, body []byte, _ time.Time) (Delivery, error) {
	header := h.Get(githubSignatureHeader)
	if header == "" {
		if h.Get(githubSHA1SignatureHeader) != "" {
			return Delivery{}, sigErr("missing X-Hub-Signature-256 header (the SHA-1 X-Hub-Signature is not accepted)")
		}
		return Delivery{}, sigErr("missing X-Hub-Signature-256 header")
	}
	hexSig, ok := strings.CutPrefix(header, "sha256=")
	if !ok {
		return Delivery{}, sigErr("malformed X-Hub-Signature-256 header")
	}
	sig, err := hex.DecodeString(hexSig)
	if err != nil || len(sig) != macSize {
		return Delivery{}, sigErr("malformed X-Hub-Signature-256 header")
	}
	if !matchAny(v.keys, [][]byte{sig}, body) {
		return Delivery{}, sigErr("no signature matches")
	}

	id := h.Get(githubDeliveryHeader)
	if err := checkDeliveryID(id, "X-GitHub-Delivery header"); err != nil {
		return Delivery{}, err
	}
	p := jsonPayload(Document(GitHub, h.Get("Content-Type"), body))
	action, _ := stringMember(jsonObject(p), "action")
	typ := GitHubEventType(h.Get(githubEventHeader), action)
	return Delivery{
		DeliveryID:   id,
		EventType:    usableEventType(typ),
		Payload:      p,
		Headers:      auditHeaders(h, githubKeep, []string{githubSignatureHeader, githubSHA1SignatureHeader}),
		ReplayDigest: replayDigest(typ, body),
	}, nil
}

// GitHubEventType is the event type of a GitHub delivery: its event (the
// X-GitHub-Event header) followed by "." and its payload's action when it
// has one ("pull_request.opened"), the event alone otherwise, and empty
// without an event. Ingest and the backfill's list of GitHub's deliveries
// both name events by it, so a redelivered event matches its route.
func GitHubEventType(event, action string) string {
	if event == "" || action == "" {
		return event
	}
	return event + "." + action
}

// githubScheme: GitHub never retries (RetryWindow 0), but an operator may
// redeliver by hand any delivery of the last 3 days.
var githubScheme = scheme{name: GitHub, verifier: newGitHub, sign: signGitHub, address: addressGitHub, redeliveryWindow: 72 * time.Hour}

func signGitHub(secret string, h http.Header, body []byte, _ time.Time) error {
	mac := hmacSHA256([]byte(secret), body)
	h.Set(githubSignatureHeader, "sha256="+hex.EncodeToString(mac))
	return nil
}

func addressGitHub(h http.Header, deliveryID, eventType string) {
	h.Set(githubDeliveryHeader, deliveryID)
	h.Set(githubEventHeader, eventType)
}
