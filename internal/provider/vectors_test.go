package provider

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestKnownAnswers checks the design brief's known-answer vectors (the
// Standard Webhooks and GitHub ones are the providers' own): Sign produces
// exactly the vector, and Verify accepts the vector's signature; a
// one-character change to the signature turns it into a SignatureError.
// Three of the vector bodies lack an event type, or are not JSON at all:
// they are accepted all the same, with an empty event type (a verified
// delivery with a delivery id is stored whatever its body).
func TestKnownAnswers(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name     string
		provider string
		secret   string
		header   string // the signature header
		want     string // its value per the vector
		h        http.Header
		body     string
		signedAt time.Time
		wantFmt  string // FormatError reason, or "" for a full Delivery
		wantID   string
		wantType string
	}{
		{
			name: "Standard Webhooks", provider: Standard, secret: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
			header: "webhook-signature", want: "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=",
			h: hdr("webhook-id", "msg_p5jXN8AQM9LWM0D4loKWxJek"), body: `{"test": 2432232314}`,
			signedAt: time.Unix(1614265330, 0), wantID: "msg_p5jXN8AQM9LWM0D4loKWxJek",
		},
		{
			name: "GitHub", provider: GitHub, secret: "It's a Secret to Everybody",
			header: "X-Hub-Signature-256", want: "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17",
			h: hdr("X-GitHub-Delivery", githubDelivery, "X-GitHub-Event", "ping"), body: `Hello, World!`,
			wantID: githubDelivery, wantType: "ping",
		},
		{
			name: "Stripe", provider: Stripe, secret: "whsec_test_secret",
			header: "Stripe-Signature", want: "t=1700000000,v1=d95c6b7477fbd7e9f90b1b0ef5f9c7ac25abca5382460e0d988c2b2a5b71b990",
			h: http.Header{}, body: `{"id":"evt_test_webhook","object":"event"}`,
			signedAt: time.Unix(1700000000, 0), wantID: "evt_test_webhook",
		},
		{
			name: "Shopify", provider: Shopify, secret: "hush",
			header: "X-Shopify-Hmac-Sha256", want: "VnKUjZsLuN5iZWjn5EntcBVCF9kMN43LglzCE1/GSeY=",
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

			// The last character of each vector is part of the MAC (hex
			// digit or base64 character before any padding).
			tampered := []byte(c.want)
			i := len(tampered) - 1
			if tampered[i] == '=' {
				i--
			}
			tampered[i] ^= 0x01
			h.Set(c.header, string(tampered))
			_, err = v.Verify(h, body, signNow)
			var se *SignatureError
			require.ErrorAs(t, err, &se)
			require.Contains(t, []string{"no signature matches", "malformed " + http.CanonicalHeaderKey(c.header) + " header", "malformed " + c.header + " header"}, se.Reason)
		})
	}
}
