package main

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/inboxhq/inbox/internal/provider"
)

// demoShopDomain is the shop of the Shopify samples (X-Shopify-Shop-Domain),
// which the handlers take as the merchant.
const demoShopDomain = "demo.myshopify.com"

// defaultEvent is the sample sent for a provider when --event is not given.
var defaultEvent = map[string]string{
	provider.Stripe:   "payment_intent.succeeded",
	provider.GitHub:   "push",
	provider.Shopify:  "orders/paid",
	provider.Standard: "payment.succeeded",
}

// samples makes realistic deliveries. One value's samples share their
// business ids, so the refund it makes refers to the payment it makes; each
// value draws new ids, so every demo run posts new payments.
type samples struct {
	now time.Time
	tag string // random suffix of the business ids: pi_demo_<tag>, pay_demo_<tag>, ...
	// Shopify ids are integers.
	orderID, refundID, transactionID int64
}

func newSamples(now time.Time) *samples {
	return &samples{
		now:           now,
		tag:           randomString(12),
		orderID:       shopifyID(),
		refundID:      shopifyID(),
		transactionID: shopifyID(),
	}
}

// build returns the sample delivery of event for provider p, to source. An
// event it has no realistic sample for gets a minimal body of that type (the
// inbox then stores it and marks it ignored, having no handler). id is the
// delivery id, random when empty.
func (s *samples) build(p, source, event, id string) (delivery, error) {
	var body any
	switch p {
	case provider.Stripe:
		if id == "" {
			id = "evt_" + randomString(24)
		}
		body = s.stripe(id, event)
	case provider.Standard:
		if id == "" {
			id = "msg_" + randomString(27)
		}
		body = s.standard(event)
	case provider.GitHub:
		if id == "" {
			id = uuid()
		}
		// "pull_request.opened" is event pull_request with action opened.
		ev, action, _ := strings.Cut(event, ".")
		body = s.github(ev, action)
		event = ev
	case provider.Shopify:
		if id == "" {
			id = uuid()
		}
		body = s.shopify(event)
	default:
		return delivery{}, fmt.Errorf("unknown provider %q", p)
	}
	b, err := json.Marshal(body)
	if err != nil {
		return delivery{}, fmt.Errorf("encode sample: %w", err)
	}
	return delivery{source: source, provider: p, id: id, event: event, body: b, header: headers(p, id, event, s.now)}, nil
}

type obj = map[string]any

func (s *samples) stripe(id, event string) any {
	pi, ch := "pi_demo_"+s.tag, "ch_demo_"+s.tag
	var data obj
	switch event {
	case "payment_intent.succeeded":
		data = obj{"object": obj{
			"id":                   pi,
			"object":               "payment_intent",
			"amount":               2000,
			"amount_capturable":    0,
			"amount_received":      2000,
			"capture_method":       "automatic",
			"created":              s.now.Unix() - 5,
			"currency":             "usd",
			"description":          "sendhook demo order",
			"latest_charge":        ch,
			"livemode":             false,
			"metadata":             obj{"order_id": "demo-" + s.tag},
			"payment_method_types": []string{"card"},
			"status":               "succeeded",
		}}
	case "charge.refunded":
		data = obj{
			"object": obj{
				"id":              ch,
				"object":          "charge",
				"amount":          2000,
				"amount_captured": 2000,
				"amount_refunded": 500,
				"captured":        true,
				"created":         s.now.Unix() - 5,
				"currency":        "usd",
				"livemode":        false,
				"paid":            true,
				"payment_intent":  pi,
				"refunded":        false,
				"status":          "succeeded",
			},
			"previous_attributes": obj{"amount_refunded": 0},
		}
	default:
		data = obj{"object": obj{"id": "obj_demo_" + s.tag}}
	}
	return obj{
		"id":               id,
		"object":           "event",
		"api_version":      "2024-06-20",
		"created":          s.now.Unix(),
		"data":             data,
		"livemode":         false,
		"pending_webhooks": 1,
		"request":          obj{"id": nil, "idempotency_key": nil},
		"type":             event,
	}
}

func (s *samples) standard(event string) any {
	data := obj{}
	switch event {
	case "payment.succeeded":
		data = obj{
			"payment_id":   "pay_demo_" + s.tag,
			"merchant_id":  "m_demo",
			"amount_minor": 4200,
			"currency":     "EUR",
			"method":       "card",
		}
	case "payment.refunded":
		data = obj{
			"payment_id":   "pay_demo_" + s.tag,
			"refund_id":    "rfd_demo_" + s.tag,
			"merchant_id":  "m_demo",
			"amount_minor": 1200,
			"currency":     "EUR",
			"reason":       "requested_by_customer",
		}
	}
	return obj{
		"type":      event,
		"timestamp": s.now.UTC().Format(time.RFC3339Nano),
		"data":      data,
	}
}

func (s *samples) shopify(topic string) any {
	created := s.now.Add(-time.Minute).UTC().Format(time.RFC3339)
	switch topic {
	case "orders/paid":
		return obj{
			"id":                   s.orderID,
			"admin_graphql_api_id": fmt.Sprintf("gid://shopify/Order/%d", s.orderID),
			"name":                 "#D" + s.tag[:6],
			"email":                "buyer@example.com",
			"created_at":           created,
			"processed_at":         created,
			"currency":             "USD",
			"presentment_currency": "USD",
			"financial_status":     "paid",
			"subtotal_price":       "19.99",
			"total_tax":            "0.00",
			"total_discounts":      "0.00",
			"total_price":          "19.99",
			"test":                 true,
			"line_items": []obj{{
				"id": s.orderID + 1, "title": "Demo T-shirt", "quantity": 1, "price": "19.99", "sku": "DEMO-TEE",
			}},
		}
	case "refunds/create":
		return obj{
			"id":                   s.refundID,
			"admin_graphql_api_id": fmt.Sprintf("gid://shopify/Refund/%d", s.refundID),
			"order_id":             s.orderID,
			"created_at":           s.now.UTC().Format(time.RFC3339),
			"note":                 "sendhook demo refund",
			"restock":              false,
			"refund_line_items":    []obj{},
			"transactions": []obj{{
				"id":       s.transactionID,
				"order_id": s.orderID,
				"kind":     "refund",
				"status":   "success",
				"amount":   "5.00",
				"currency": "USD",
				"gateway":  "bogus",
				"test":     true,
			}},
		}
	default:
		return obj{"id": s.orderID}
	}
}

func (s *samples) github(event, action string) any {
	repo := obj{
		"id": 1296269, "name": "Hello-World", "full_name": "octocat/Hello-World", "private": false,
		"owner":          obj{"login": "octocat", "id": 1, "type": "User"},
		"html_url":       "https://github.com/octocat/Hello-World",
		"default_branch": "main",
	}
	sender := obj{"login": "octocat", "id": 1, "type": "User"}
	if event != "push" {
		b := obj{"repository": repo, "sender": sender}
		if action != "" {
			b["action"] = action
		}
		return b
	}
	before, after := randomHex(20), randomHex(20)
	commit := obj{
		"id":        after,
		"tree_id":   randomHex(20),
		"distinct":  true,
		"message":   "Demo commit sent by sendhook",
		"timestamp": s.now.UTC().Format(time.RFC3339),
		"url":       "https://github.com/octocat/Hello-World/commit/" + after,
		"author":    obj{"name": "The Octocat", "email": "octocat@github.com", "username": "octocat"},
		"committer": obj{"name": "The Octocat", "email": "octocat@github.com", "username": "octocat"},
		"added":     []string{},
		"removed":   []string{},
		"modified":  []string{"README.md"},
	}
	return obj{
		"ref":         "refs/heads/main",
		"before":      before,
		"after":       after,
		"created":     false,
		"deleted":     false,
		"forced":      false,
		"base_ref":    nil,
		"compare":     "https://github.com/octocat/Hello-World/compare/" + before[:12] + "..." + after[:12],
		"commits":     []obj{commit},
		"head_commit": commit,
		"repository":  repo,
		"pusher":      obj{"name": "octocat", "email": "octocat@github.com"},
		"sender":      sender,
	}
}

// randomBytes fills n bytes from crypto/rand, which does not fail on the
// platforms Go supports.
func randomBytes(n int) []byte {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return b
}

const alphanumeric = "abcdefghijklmnopqrstuvwxyz0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ"

// randomString is n random characters of a-z, 0-9 and A-Z. The modulo bias is
// irrelevant for demo ids.
func randomString(n int) string {
	b := randomBytes(n)
	for i := range b {
		b[i] = alphanumeric[int(b[i])%len(alphanumeric)]
	}
	return string(b)
}

func randomHex(n int) string { return hex.EncodeToString(randomBytes(n)) }

// uuid is a random (version 4) UUID, the form of GitHub's and Shopify's
// delivery ids.
func uuid() string {
	b := randomBytes(16)
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b)
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

// shopifyID is a random 13-digit id: Shopify's ids are integers larger than
// 2^32, and staying below 2^53 keeps them exact in any JSON reader.
func shopifyID() int64 {
	return 1_000_000_000_000 + int64(binary.BigEndian.Uint64(randomBytes(8))%8_000_000_000_000)
}
