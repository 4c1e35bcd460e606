// Package webhooktest builds signed webhook requests the way each provider
// sends them, for tests, benchmarks and the demo sender. It signs with
// provider.Sign and sets each provider's delivery id and event headers.
package webhooktest

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/inboxhq/inbox/internal/provider"
)

// Delivery is one webhook delivery to send.
type Delivery struct {
	Provider   string
	Secret     string
	DeliveryID string // Standard: webhook-id; GitHub: X-GitHub-Delivery; Shopify: X-Shopify-Webhook-Id; Stripe: must equal the body's id
	EventType  string // GitHub: X-GitHub-Event; Shopify: X-Shopify-Topic; others: in the body
	Body       []byte
	// Extra headers (e.g. X-Shopify-Shop-Domain).
	Header http.Header
	// SignedAt defaults to now.
	SignedAt time.Time
}

// Headers returns the headers the provider would send for d, signature
// included.
func (d Delivery) Headers() (http.Header, error) {
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	for k, vs := range d.Header {
		for _, v := range vs {
			h.Add(k, v)
		}
	}
	provider.Address(d.Provider, h, d.DeliveryID, d.EventType)
	at := d.SignedAt
	if at.IsZero() {
		at = time.Now()
	}
	if err := provider.Sign(d.Provider, d.Secret, h, d.Body, at); err != nil {
		return nil, err
	}
	return h, nil
}

// Request builds the POST request for d to url.
func (d Delivery) Request(ctx context.Context, url string) (*http.Request, error) {
	h, err := d.Headers()
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(d.Body))
	if err != nil {
		return nil, err
	}
	req.Header = h
	return req, nil
}

// StripeEvent returns a Stripe event body.
func StripeEvent(id, typ, object string) []byte {
	return fmt.Appendf(nil, `{"id":%q,"object":"event","api_version":"2024-06-20","created":1700000000,"livemode":false,"type":%q,"data":{"object":%s}}`, id, typ, object)
}

// StripePayment returns a payment_intent.succeeded event body.
func StripePayment(eventID, paymentIntent string, amount int64, currency string) []byte {
	return StripeEvent(eventID, "payment_intent.succeeded",
		fmt.Sprintf(`{"id":%q,"object":"payment_intent","amount":%d,"amount_received":%d,"currency":%q,"status":"succeeded"}`, paymentIntent, amount, amount, currency))
}

// StripeRefund returns a charge.refunded event body (amountRefunded is
// cumulative, as Stripe sends it).
func StripeRefund(eventID, charge, paymentIntent string, amount, amountRefunded int64, currency string) []byte {
	return StripeEvent(eventID, "charge.refunded",
		fmt.Sprintf(`{"id":%q,"object":"charge","amount":%d,"amount_refunded":%d,"currency":%q,"payment_intent":%q,"refunded":%t}`, charge, amount, amountRefunded, currency, paymentIntent, amountRefunded == amount))
}

// StandardPayment returns a Standard Webhooks payment.succeeded body.
func StandardPayment(paymentID, merchant string, amount int64, currency string) []byte {
	return fmt.Appendf(nil, `{"type":"payment.succeeded","timestamp":"2026-11-30T00:00:00Z","data":{"payment_id":%q,"merchant_id":%q,"amount_minor":%d,"currency":%q}}`, paymentID, merchant, amount, currency)
}

// StandardRefund returns a Standard Webhooks payment.refunded body.
func StandardRefund(refundID, paymentID, merchant string, amount int64, currency string) []byte {
	return fmt.Appendf(nil, `{"type":"payment.refunded","timestamp":"2026-11-30T00:00:00Z","data":{"refund_id":%q,"payment_id":%q,"merchant_id":%q,"amount_minor":%d,"currency":%q}}`, refundID, paymentID, merchant, amount, currency)
}

// ShopifyOrderPaid returns an orders/paid body.
func ShopifyOrderPaid(orderID int64, total, currency string) []byte {
	return fmt.Appendf(nil, `{"id":%d,"name":"#%d","financial_status":"paid","total_price":%q,"currency":%q,"presentment_currency":%q}`, orderID, orderID, total, currency, currency)
}

// ShopifyRefund returns a refunds/create body.
func ShopifyRefund(refundID, orderID int64, amount, currency string) []byte {
	return fmt.Appendf(nil, `{"id":%d,"order_id":%d,"transactions":[{"id":%d,"kind":"refund","status":"success","amount":%q,"currency":%q}]}`, refundID, orderID, refundID+1, amount, currency)
}

// GitHubPush returns a push event body.
func GitHubPush(ref string) []byte {
	return fmt.Appendf(nil, `{"ref":%q,"repository":{"full_name":"octo/repo"},"commits":[]}`, ref)
}

// GitHubPushOf returns the push event of one delivery: its "after" (the
// commit the branch moved to) names the delivery, as two real pushes
// differ. GitHub does not sign the delivery id, so two deliveries of one
// body are one delivery replayed (provider.Delivery.ReplayDigest).
func GitHubPushOf(ref, deliveryID string) []byte {
	return fmt.Appendf(nil, `{"ref":%q,"after":%q,"repository":{"full_name":"octo/repo"},"commits":[]}`, ref, deliveryID)
}
