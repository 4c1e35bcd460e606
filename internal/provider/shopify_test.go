package provider

import (
	"encoding/base64"
	"encoding/hex"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

const (
	shopifySecret    = "hush"
	shopifyOldSecret = "an old Shopify secret, rotated out"
	shopifyWebhookID = "b54557e4-bdd9-4b37-8a5f-bf7d70bcd043"
)

var shopifyBody = []byte(`{"id":820982911946154508,"email":"jon@example.com","total_price":"12.50","currency":"EUR"}`)

func shopifySig(secret string, body []byte) string { return b64MAC([]byte(secret), string(body)) }

func shopifyHeaders(sig string) http.Header {
	h := hdr("X-Shopify-Webhook-Id", shopifyWebhookID, "X-Shopify-Topic", "orders/paid")
	if sig != "" {
		h.Set("X-Shopify-Hmac-Sha256", sig)
	}
	return h
}

func shopifyCases(t testing.TB) []verifyCase {
	cfg := Config{Provider: Shopify, Secrets: []string{shopifySecret}}
	rotated := Config{Provider: Shopify, Secrets: []string{shopifyOldSecret, shopifySecret}}
	goodSig := shopifySig(shopifySecret, shopifyBody)
	good := shopifyHeaders(goodSig)
	sig := func(v string) http.Header { return with(good, "X-Shopify-Hmac-Sha256", v) }
	c := func(name string, h http.Header, body []byte, wantSig, wantFmt string) verifyCase {
		return verifyCase{name: name, cfg: cfg, h: h, body: body, now: t0, wantSig: wantSig, wantFmt: wantFmt}
	}
	ok := func(name string, cfg Config, h http.Header) verifyCase {
		return verifyCase{name: name, cfg: cfg, h: h, body: shopifyBody, now: t0, wantID: shopifyWebhookID, wantType: "orders/paid"}
	}
	// stored is a verified delivery stored whatever its body and topic.
	stored := func(name string, h http.Header, body []byte, wantType string) verifyCase {
		return verifyCase{name: name, cfg: cfg, h: h, body: body, now: t0, wantID: shopifyWebhookID, wantType: wantType}
	}
	const (
		noMatch   = "no signature matches"
		malformed = "malformed X-Shopify-Hmac-Sha256 header"
	)
	notJSON := []byte(`<order><id>1</id></order>`)
	return []verifyCase{
		ok("valid", cfg, good),
		ok("signed by Sign", cfg, signed(t, Shopify, shopifySecret, shopifyHeaders(""), shopifyBody, t0)),
		ok("rotation: second secret matches", rotated, good),
		ok("rotation: first secret matches", rotated, sig(shopifySig(shopifyOldSecret, shopifyBody))),

		c("missing header", shopifyHeaders(""), shopifyBody, "missing X-Shopify-Hmac-Sha256 header", ""),
		c("hex instead of base64", sig(hex.EncodeToString(macOf([]byte(shopifySecret), string(shopifyBody)))), shopifyBody, malformed, ""),
		c("not base64", sig("not base64 at all!"), shopifyBody, malformed, ""),
		c("unpadded", sig(strings.TrimRight(goodSig, "=")), shopifyBody, malformed, ""),
		c("too short", sig(base64.StdEncoding.EncodeToString([]byte("short"))), shopifyBody, malformed, ""),
		c("prefixed", sig("sha256="+goodSig), shopifyBody, malformed, ""),
		c("two signatures", sig(shopifySig(shopifyOldSecret, shopifyBody)+","+goodSig), shopifyBody, malformed, ""),
		c("tampered body", good, flip(shopifyBody, 20), noMatch, ""),
		c("tampered signature", sig(b64Flip(goodSig)), shopifyBody, noMatch, ""),
		c("wrong secret", sig(shopifySig("not the secret", shopifyBody)), shopifyBody, noMatch, ""),
		c("old secret after rotation", sig(shopifySig(shopifyOldSecret, shopifyBody)), shopifyBody, noMatch, ""),

		stored("not JSON", shopifyHeaders(shopifySig(shopifySecret, notJSON)), notJSON, "orders/paid"),
		c("missing webhook id", with(good, "X-Shopify-Webhook-Id", ""), shopifyBody, "", "missing delivery id (X-Shopify-Webhook-Id header)"),
		c("event id is not the delivery id", with(with(good, "X-Shopify-Webhook-Id", ""), "X-Shopify-Event-Id", "e_1"), shopifyBody, "", "missing delivery id (X-Shopify-Webhook-Id header)"),
		c("webhook id too long", with(good, "X-Shopify-Webhook-Id", strings.Repeat("w", 513)), shopifyBody, "", "delivery id (X-Shopify-Webhook-Id header) is longer than 512 bytes"),
		stored("missing topic", with(good, "X-Shopify-Topic", ""), shopifyBody, ""),
		stored("topic too long", with(good, "X-Shopify-Topic", strings.Repeat("t", 257)), shopifyBody, ""),
	}
}

func TestShopifyDelivery(t *testing.T) {
	t.Parallel()
	v, err := New(Config{Provider: Shopify, Secrets: []string{shopifySecret}})
	require.NoError(t, err)
	h := signed(t, Shopify, shopifySecret, hdr(
		"X-Shopify-Webhook-Id", shopifyWebhookID,
		"X-Shopify-Topic", "orders/paid",
		"X-Shopify-Event-Id", "98880550-7158-44d4-b7cd-2c97c8a091b5",
		"X-Shopify-Shop-Domain", "example.myshopify.com",
		"X-Shopify-Triggered-At", "2023-03-29T18:00:27.877041743Z",
		"X-Shopify-API-Version", "2025-01",
		"X-Shopify-Order-Id", "820982911946154508",
		"Content-Type", "application/json",
	), shopifyBody, t0)
	d, err := v.Verify(h, shopifyBody, t0)
	require.NoError(t, err)
	require.Equal(t, Delivery{
		DeliveryID: shopifyWebhookID,
		EventType:  "orders/paid",
		Payload:    shopifyBody,
		Headers: map[string]string{
			"Content-Type":           "application/json",
			"X-Shopify-Webhook-Id":   shopifyWebhookID,
			"X-Shopify-Topic":        "orders/paid",
			"X-Shopify-Event-Id":     "98880550-7158-44d4-b7cd-2c97c8a091b5",
			"X-Shopify-Shop-Domain":  "example.myshopify.com",
			"X-Shopify-Triggered-At": "2023-03-29T18:00:27.877041743Z",
			"X-Shopify-Api-Version":  "2025-01",
			"X-Shopify-Hmac-Sha256":  Redacted,
		},
		ReplayDigest: sha256Of("orders/paid\x00" + string(shopifyBody)),
	}, d)
}
