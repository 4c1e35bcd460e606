package provider

import (
	"encoding/hex"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Stripe's signature header.
const stripeSignatureHeader = "Stripe-Signature"

// stripeVerifier verifies Stripe webhooks: Stripe-Signature
// "t=<unix>,v1=<hex>[,v1=<hex>...]", HMAC-SHA256 of t + "." + body keyed by
// the signing secret as is ("whsec_" prefix included). It is safe for
// concurrent use.
type stripeVerifier struct {
	keys      [][]byte
	tolerance time.Duration
}

func newStripe(cfg Config) (Verifier, error) {
	keys, err := rawKeys(cfg.Secrets)
	if err != nil {
		return nil, err
	}
	return &stripeVerifier{keys: keys, tolerance: cfg.Tolerance}, nil
}

// Verify implements Verifier. Any v1 signature matching any secret verifies;
// v0 and unknown keys are ignored. The timestamp is checked before the MAC,
// as Stripe's own libraries do. The delivery id is the body's "id" (evt_...;
// a verified body without one is a FormatError, as it cannot be deduplicated)
// and the event type its "type", empty when it has none.
func (v *stripeVerifier) Verify(h http.Header, body []byte, now time.Time) (Delivery, error) {
	header := h.Get(stripeSignatureHeader)
	if header == "" {
		return Delivery{}, sigErr("missing Stripe-Signature header")
	}
	t, signedAt, sigs, err := parseStripeSignature(header)
	if err != nil {
		return Delivery{}, err
	}
	if err := checkTimestamp(signedAt, now, v.tolerance); err != nil {
		return Delivery{}, err
	}
	if !matchAny(v.keys, sigs, []byte(t), []byte("."), body) {
		return Delivery{}, sigErr("no signature matches")
	}

	p := jsonPayload(body)
	obj := jsonObject(p)
	id, _ := stringMember(obj, "id")
	if err := checkDeliveryID(id, `body "id"`); err != nil {
		return Delivery{}, err
	}
	typ, _ := stringMember(obj, "type")
	return Delivery{
		DeliveryID: id,
		EventType:  usableEventType(typ),
		Payload:    p,
		Headers:    auditHeaders(h, nil, []string{stripeSignatureHeader}),
		SignedAt:   signedAt,
	}, nil
}

// parseStripeSignature splits a Stripe-Signature header into its timestamp
// (as sent, since it is signed as sent, and parsed) and its decodable v1
// signatures. Every element must be key=value; exactly one t, a Unix time in
// seconds, is required; v0 and unknown keys are ignored, as are v1 values
// that are not 32 bytes of hex.
func parseStripeSignature(header string) (t string, signedAt time.Time, sigs [][]byte, err error) {
	malformed := sigErr("malformed Stripe-Signature header")
	var haveT, haveV1 bool
	for elem := range strings.SplitSeq(header, ",") {
		key, val, ok := strings.Cut(strings.TrimSpace(elem), "=")
		if !ok {
			return "", time.Time{}, nil, malformed
		}
		switch key {
		case "t":
			if haveT {
				return "", time.Time{}, nil, malformed
			}
			if signedAt, ok = parseUnix(val); !ok {
				return "", time.Time{}, nil, malformed
			}
			t, haveT = val, true
		case "v1":
			haveV1 = true
			if sig, err := hex.DecodeString(val); err == nil && len(sig) == macSize {
				sigs = append(sigs, sig)
			}
		}
	}
	switch {
	case !haveT:
		return "", time.Time{}, nil, malformed
	case !haveV1:
		return "", time.Time{}, nil, sigErr("no v1 signature in Stripe-Signature header")
	case len(sigs) == 0:
		return "", time.Time{}, nil, malformed
	}
	return t, signedAt, sigs, nil
}

// stripeScheme: Stripe carries the delivery id and type in the body; it
// retries for up to 3 days.
var stripeScheme = scheme{name: Stripe, verifier: newStripe, sign: signStripe, retryWindow: 72 * time.Hour}

func signStripe(secret string, h http.Header, body []byte, now time.Time) error {
	t := strconv.FormatInt(now.Unix(), 10)
	mac := hmacSHA256([]byte(secret), []byte(t), []byte("."), body)
	h.Set(stripeSignatureHeader, "t="+t+",v1="+hex.EncodeToString(mac))
	return nil
}
