package handlers

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/inboxhq/inbox/internal/envelope"
)

func TestMerchant(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		env  envelope.Envelope
		want string
	}{
		{"stripe connect", envelope.Envelope{Source: "s", Provider: "stripe", Payload: []byte(`{"id":"evt","account":"acct_9"}`)}, "acct_9"},
		{"stripe platform", envelope.Envelope{Source: "s", Provider: "stripe", Payload: []byte(`{"id":"evt"}`)}, "s"},
		{"standard", envelope.Envelope{Source: "p", Provider: "standard", Payload: []byte(`{"data":{"merchant_id":"m_1"}}`)}, "m_1"},
		{"standard unreadable", envelope.Envelope{Source: "p", Provider: "standard", Payload: []byte(`[`)}, "p"},
		{"shopify", envelope.Envelope{Source: "sh", Provider: "shopify", Headers: map[string]string{"X-Shopify-Shop-Domain": "a.myshopify.com"}, Payload: []byte(`{}`)}, "a.myshopify.com"},
		{"github", envelope.Envelope{Source: "gh", Provider: "github", Payload: []byte(`{}`)}, "gh"},
	}
	for _, tc := range cases {
		require.Equal(t, tc.want, Merchant(&tc.env), tc.name)
	}
}
