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
// Only JSON bodies are accepted: a webhook configured with the
// application/x-www-form-urlencoded content type gets a FormatError saying
// so. The delivery id is X-GitHub-Delivery (the same on a redelivery) and
// the event type X-GitHub-Event, followed by "." and the body's "action"
// when the body is an object with a non-empty string action
// ("pull_request.opened"). Neither header is covered by the signature.
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

	if !isJSON(body) {
		return Delivery{}, formatErr("body is not JSON: set the GitHub webhook's content type to application/json")
	}
	id := h.Get(githubDeliveryHeader)
	if err := checkDeliveryID(id, "X-GitHub-Delivery header"); err != nil {
		return Delivery{}, err
	}
	typ := h.Get(githubEventHeader)
	if typ == "" {
		return Delivery{}, formatErr("missing event type (X-GitHub-Event header)")
	}
	if action, ok := stringMember(jsonObject(body), "action"); ok && action != "" {
		typ += "." + action
	}
	if err := checkEventType(typ, "X-GitHub-Event header and body \"action\""); err != nil {
		return Delivery{}, err
	}
	return Delivery{
		DeliveryID: id,
		EventType:  typ,
		Payload:    payload(body),
		Headers:    auditHeaders(h, githubKeep, []string{githubSignatureHeader, githubSHA1SignatureHeader}),
	}, nil
}
