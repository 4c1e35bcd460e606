package provider

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestKnownAnswers checks the design brief's known-answer vectors (the
// Standard Webhooks and GitHub ones are the providers' own): Sign produces
// exactly the vector, and Verify accepts the vector's signature. Three of the
// vector bodies lack an event type, or are not JSON at all: they are
// accepted all the same, with an empty event type (a verified delivery with
// a delivery id is stored whatever its body). The same signature with one
// bit of its MAC flipped (and encoded again, so it still decodes) turns it
// into a SignatureError "no signature matches": the comparison is what
// rejects it.
func TestKnownAnswers(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name     string
		provider string
		secret   string
		header   string // the signature header
		want     string // its value per the vector
		prefix   string // what precedes the MAC in want
		base64   bool   // the MAC is base64 (else hex)
		h        http.Header
		body     string
		signedAt time.Time
		wantFmt  string // FormatError reason, or "" for a full Delivery
		wantID   string
		wantType string
	}{
		{
			name: "Standard Webhooks", provider: Standard, secret: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
			header: "webhook-signature", want: "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=", prefix: "v1,", base64: true,
			h: hdr("webhook-id", "msg_p5jXN8AQM9LWM0D4loKWxJek"), body: `{"test": 2432232314}`,
			signedAt: time.Unix(1614265330, 0), wantID: "msg_p5jXN8AQM9LWM0D4loKWxJek",
		},
		{
			name: "GitHub", provider: GitHub, secret: "It's a Secret to Everybody",
			header: "X-Hub-Signature-256", want: "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17", prefix: "sha256=",
			h: hdr("X-GitHub-Delivery", githubDelivery, "X-GitHub-Event", "ping"), body: `Hello, World!`,
			wantID: githubDelivery, wantType: "ping",
		},
		{
			name: "Stripe", provider: Stripe, secret: "whsec_test_secret",
			header: "Stripe-Signature", want: "t=1700000000,v1=d95c6b7477fbd7e9f90b1b0ef5f9c7ac25abca5382460e0d988c2b2a5b71b990", prefix: "t=1700000000,v1=",
			h: http.Header{}, body: `{"id":"evt_test_webhook","object":"event"}`,
			signedAt: time.Unix(1700000000, 0), wantID: "evt_test_webhook",
		},
		{
			name: "Shopify", provider: Shopify, secret: "hush",
			header: "X-Shopify-Hmac-Sha256", want: "VnKUjZsLuN5iZWjn5EntcBVCF9kMN43LglzCE1/GSeY=", base64: true,
			h: hdr("X-Shopify-Webhook-Id", shopifyWebhookID, "X-Shopify-Topic", "orders/create"), body: `{"id":1}`,
			wantID: shopifyWebhookID, wantType: "orders/create",
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			body := []byte(c.body)
			signNow := c.signedAt
			if signNow.IsZero() {
				signNow = t0 // unused by providers that sign no timestamp
			}

			h := signed(t, c.provider, c.secret, c.h, body, signNow)
			require.Equal(t, c.want, h.Get(c.header), "Sign")

			v, err := New(Config{Provider: c.provider, Secrets: []string{c.secret}})
			require.NoError(t, err)
			h = c.h.Clone()
			h.Set(c.header, c.want)
			if c.provider == Standard {
				h.Set("webhook-timestamp", "1614265330")
			}
			for _, now := range []time.Time{signNow, signNow.Add(-time.Minute), signNow.Add(4 * time.Minute)} {
				d, err := v.Verify(h, body, now)
				if c.wantFmt != "" {
					var fe *FormatError
					require.ErrorAs(t, err, &fe)
					require.Equal(t, c.wantFmt, fe.Reason)
					continue
				}
				require.NoError(t, err)
				require.Equal(t, c.wantID, d.DeliveryID)
				require.Equal(t, c.wantType, d.EventType)
				require.Equal(t, c.signedAt.UTC(), d.SignedAt)
			}

			// The same signature with one bit of its MAC flipped, encoded
			// again: it parses and decodes, and only the comparison fails.
			require.True(t, strings.HasPrefix(c.want, c.prefix))
			enc := c.want[len(c.prefix):]
			var mac []byte
			if c.base64 {
				mac, err = base64.StdEncoding.DecodeString(enc)
			} else {
				mac, err = hex.DecodeString(enc)
			}
			require.NoError(t, err)
			require.Len(t, mac, 32, "an HMAC-SHA256")
			for _, bit := range []int{0, 255} { // the first and the last bit
				flipped := bytes.Clone(mac)
				flipped[bit/8] ^= 0x80 >> (bit % 8)
				tampered := c.prefix + hex.EncodeToString(flipped)
				if c.base64 {
					tampered = c.prefix + base64.StdEncoding.EncodeToString(flipped)
				}
				h.Set(c.header, tampered)
				_, err = v.Verify(h, body, signNow)
				var se *SignatureError
				require.ErrorAs(t, err, &se, "bit %d", bit)
				require.Equal(t, "no signature matches", se.Reason, "bit %d", bit)
			}
		})
	}
}
