package handlers

import (
	"encoding/json"

	"github.com/inboxhq/inbox/internal/envelope"
	"github.com/inboxhq/inbox/internal/provider"
)

// merchant is the one rule for whom an envelope's money belongs to: named,
// the merchant its payload names (Stripe's Connect "account", Standard
// Webhooks' data.merchant_id, Shopify's X-Shopify-Shop-Domain header), else
// account, the account configured for its source (account_id), else the
// source's name. The payment handlers post under it; Merchant applies it
// for the throttle.
func merchant(named, account, source string) string {
	switch {
	case named != "":
		return named
	case account != "":
		return account
	default:
		return source
	}
}

// Merchant returns the merchant an envelope belongs to, by the rule the
// payment handlers post under (see merchant), given its source's account
// (account_id, "" when none). It never fails: an unreadable payload names
// no merchant. Used to key per-merchant throttling before any handler runs.
func Merchant(env *envelope.Envelope, account string) string {
	var named string
	switch env.Provider {
	case provider.Stripe:
		var ev struct {
			Account string `json:"account"`
		}
		if json.Unmarshal(env.Document(), &ev) == nil {
			named = ev.Account
		}
	case provider.Standard:
		var ev struct {
			Data struct {
				MerchantID string `json:"merchant_id"`
			} `json:"data"`
		}
		if json.Unmarshal(env.Document(), &ev) == nil {
			named = ev.Data.MerchantID
		}
	case provider.Shopify:
		named = header(env, shopifyShopHeader)
	}
	return merchant(named, account, env.Source)
}
