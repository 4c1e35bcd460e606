package provider

import (
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"
)

// Sign sets on h the signature headers provider would send with body, signed
// with secret at now, so that a Verifier configured with that secret accepts
// the request. It is meant for tests, demos and tooling; the inbox itself
// only verifies.
//
// It sets, per provider:
//   - stripe: Stripe-Signature "t=<now>,v1=<hex>";
//   - standard: webhook-timestamp and webhook-signature "v1,<base64>". The
//     caller must set webhook-id first, since it is signed;
//   - github: X-Hub-Signature-256 "sha256=<hex>";
//   - shopify: X-Shopify-Hmac-Sha256 "<base64>".
//
// It sets no delivery id or event type header (those are the caller's), and
// replaces any signature already there. Its errors never contain the secret.
func Sign(provider string, secret string, h http.Header, body []byte, now time.Time) error {
	if secret == "" {
		return errors.New("secret is empty")
	}
	switch provider {
	case Stripe:
		t := strconv.FormatInt(now.Unix(), 10)
		mac := hmacSHA256([]byte(secret), []byte(t), []byte("."), body)
		h.Set(stripeSignatureHeader, "t="+t+",v1="+hex.EncodeToString(mac))
	case Standard:
		id := h.Get(standardIDHeader)
		if id == "" {
			return errors.New("webhook-id header must be set before signing")
		}
		key, err := standardKey(secret)
		if err != nil {
			return fmt.Errorf("secret %w", err)
		}
		ts := strconv.FormatInt(now.Unix(), 10)
		mac := hmacSHA256(key, []byte(id), []byte("."), []byte(ts), []byte("."), body)
		h.Set(standardTimestampHeader, ts)
		h.Set(standardSignatureHeader, "v1,"+base64.StdEncoding.EncodeToString(mac))
	case GitHub:
		mac := hmacSHA256([]byte(secret), body)
		h.Set(githubSignatureHeader, "sha256="+hex.EncodeToString(mac))
	case Shopify:
		mac := hmacSHA256([]byte(secret), body)
		h.Set(shopifySignatureHeader, base64.StdEncoding.EncodeToString(mac))
	default:
		return fmt.Errorf("%w %q", ErrUnknownProvider, provider)
	}
	return nil
}
