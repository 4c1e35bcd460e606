package provider

import (
	"encoding/base64"
	"net/http"
	"time"
)

// Shopify's headers.
const (
	shopifySignatureHeader = "X-Shopify-Hmac-Sha256"
	shopifyWebhookIDHeader = "X-Shopify-Webhook-Id"
	shopifyTopicHeader     = "X-Shopify-Topic"
)

var shopifyKeep = []string{
	shopifyWebhookIDHeader,
	shopifyTopicHeader,
	"X-Shopify-Event-Id",
	"X-Shopify-Shop-Domain",
	"X-Shopify-Triggered-At",
	"X-Shopify-API-Version",
}

// shopifyVerifier verifies Shopify webhooks: X-Shopify-Hmac-Sha256, the
// base64 HMAC-SHA256 of the body keyed by the app's secret. Shopify signs no
// timestamp, so the delivery id is the only replay defence. It is safe for
// concurrent use.
type shopifyVerifier struct {
	keys [][]byte
}

func newShopify(cfg Config) (Verifier, error) {
	keys, err := rawKeys(cfg.Secrets)
	if err != nil {
		return nil, err
	}
	return &shopifyVerifier{keys: keys}, nil
}

// Verify implements Verifier. The delivery id is X-Shopify-Webhook-Id and
// the event type X-Shopify-Topic ("orders/paid"); neither header is covered
// by the signature. Any verified body is accepted (Payload is nil when it is
// not JSON) and the event type may be empty. X-Shopify-Event-Id, X-Shopify-Shop-Domain,
// X-Shopify-Triggered-At and X-Shopify-API-Version are kept in Headers.
func (v *shopifyVerifier) Verify(h http.Header, body []byte, _ time.Time) (Delivery, error) {
	header := h.Get(shopifySignatureHeader)
	if header == "" {
		return Delivery{}, sigErr("missing X-Shopify-Hmac-Sha256 header")
	}
	sig, err := base64.StdEncoding.Strict().DecodeString(header)
	if err != nil || len(sig) != macSize {
		return Delivery{}, sigErr("malformed X-Shopify-Hmac-Sha256 header")
	}
	if !matchAny(v.keys, [][]byte{sig}, body) {
		return Delivery{}, sigErr("no signature matches")
	}

	id := h.Get(shopifyWebhookIDHeader)
	if err := checkDeliveryID(id, "X-Shopify-Webhook-Id header"); err != nil {
		return Delivery{}, err
	}
	return Delivery{
		DeliveryID:   id,
		EventType:    usableEventType(h.Get(shopifyTopicHeader)),
		Payload:      jsonPayload(body),
		Headers:      auditHeaders(h, shopifyKeep, []string{shopifySignatureHeader}),
		ReplayDigest: replayDigest(h.Get(shopifyTopicHeader), body),
	}, nil
}

// shopifyScheme: Shopify retries 8 times over 4 hours (since its September
// 2024 change; 48 hours before).
var shopifyScheme = scheme{name: Shopify, verifier: newShopify, sign: signShopify, address: addressShopify, retryWindow: 4 * time.Hour}

func signShopify(secret string, h http.Header, body []byte, _ time.Time) error {
	mac := hmacSHA256([]byte(secret), body)
	h.Set(shopifySignatureHeader, base64.StdEncoding.EncodeToString(mac))
	return nil
}

func addressShopify(h http.Header, deliveryID, eventType string) {
	h.Set(shopifyWebhookIDHeader, deliveryID)
	h.Set(shopifyTopicHeader, eventType)
	if h.Get("X-Shopify-Event-Id") == "" {
		h.Set("X-Shopify-Event-Id", "ev-"+deliveryID)
	}
}
