package handlers

import (
	"encoding/json"

	"github.com/inboxhq/inbox/internal/envelope"
	"github.com/inboxhq/inbox/internal/provider"
)

// Merchant returns the merchant an envelope belongs to, by the same rule the
// payment handlers post under: Stripe's Connect account, Standard Webhooks'
// data.merchant_id, Shopify's shop domain; else the source name. It never
// fails: an unreadable payload belongs to its source. Used to key per-merchant
// throttling before any handler runs.
func Merchant(env *envelope.Envelope) string {
	switch env.Provider {
	case provider.Stripe:
		var ev struct {
			Account string `json:"account"`
		}
		if json.Unmarshal(env.BodyOrPayload(), &ev) == nil && ev.Account != "" {
			return ev.Account
		}
	case provider.Standard:
		var ev struct {
			Data struct {
				MerchantID string `json:"merchant_id"`
			} `json:"data"`
		}
		if json.Unmarshal(env.BodyOrPayload(), &ev) == nil && ev.Data.MerchantID != "" {
			return ev.Data.MerchantID
		}
	case provider.Shopify:
		return shopifyShop(env)
	}
	return env.Source
}
