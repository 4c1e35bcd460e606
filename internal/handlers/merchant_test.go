package handlers

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/inboxhq/inbox/internal/envelope"
)

func TestMerchant(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name    string
		env     envelope.Envelope
		account string
		want    string
	}{
		{"stripe connect", envelope.Envelope{Source: "s", Provider: "stripe", Body: []byte(`{"id":"evt","account":"acct_9"}`)}, "", "acct_9"},
		{"stripe connect beats the source's account", envelope.Envelope{Source: "s", Provider: "stripe", Body: []byte(`{"id":"evt","account":"acct_9"}`)}, "acct_1", "acct_9"},
		{"stripe platform", envelope.Envelope{Source: "s", Provider: "stripe", Body: []byte(`{"id":"evt"}`)}, "", "s"},
		{"stripe platform, source account", envelope.Envelope{Source: "s", Provider: "stripe", Body: []byte(`{"id":"evt"}`)}, "acct_1", "acct_1"},
		{"standard", envelope.Envelope{Source: "p", Provider: "standard", Body: []byte(`{"data":{"merchant_id":"m_1"}}`)}, "acct_1", "m_1"},
		{"standard unreadable", envelope.Envelope{Source: "p", Provider: "standard", Body: []byte(`[`)}, "", "p"},
		{"standard without merchant, source account", envelope.Envelope{Source: "p", Provider: "standard", Body: []byte(`{"data":{}}`)}, "acct_1", "acct_1"},
		{"shopify", envelope.Envelope{Source: "sh", Provider: "shopify", Headers: map[string]string{"X-Shopify-Shop-Domain": "a.myshopify.com"}, Body: []byte(`{}`)}, "acct_1", "a.myshopify.com"},
		{"shopify without shop header", envelope.Envelope{Source: "sh", Provider: "shopify", Body: []byte(`{}`)}, "", "sh"},
		{"github", envelope.Envelope{Source: "gh", Provider: "github", Body: []byte(`{}`)}, "", "gh"},
		{"github, source account", envelope.Envelope{Source: "gh", Provider: "github", Body: []byte(`{}`)}, "org_1", "org_1"},
	}
	for _, tc := range cases {
		require.Equal(t, tc.want, Merchant(&tc.env, tc.account), tc.name)
	}
}
