package handlers

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"math/bits"

	"github.com/inboxhq/inbox/internal/envelope"
	"github.com/inboxhq/inbox/internal/ledger"
	"github.com/inboxhq/inbox/internal/provider"
)

// shopifyShopHeader names the shop a delivery is for. It names the merchant
// (the ledger accounts' owner; see merchant), never a business key:
// Shopify's HMAC covers the body only, so the header of a replayed signed
// body can say anything.
const shopifyShopHeader = "X-Shopify-Shop-Domain"

// shopifyMerchant is the merchant of a Shopify run: its shop (see merchant).
func shopifyMerchant(run Run) string {
	return merchant(header(run.Envelope, shopifyShopHeader), run.Account, run.Envelope.Source)
}

// shopifyOrderKey is the business key of an order's payment. Shopify order
// ids are globally unique, so the key is the id alone: a signed body replayed
// under another shop header maps to the same key, and ledger.Post refuses it
// (a different merchant) or finds it posted.
func shopifyOrderKey(orderID string) string { return "shopify:order:" + orderID }

// shopifyRefundKey is the business key of a refund; refund ids are globally
// unique too.
func shopifyRefundKey(refundID string) string { return "shopify:refund:" + refundID }

// shopifyOrderPaid posts the order's total_price, a decimal string in the
// order's currency (else its presentment_currency), as a payment keyed by the
// order id, for the shop (see shopifyMerchant). An order with a zero total (a
// free order, one paid by gift card) moves no money: a no-op.
func shopifyOrderPaid(ctx context.Context, run Run) (json.RawMessage, error) {
	env := run.Envelope
	p, err := shopifyPayment(run)
	if err != nil {
		return nil, invalidPayload(fmt.Errorf("shopify %s: %w", env.EventType, err))
	}
	if p.AmountMinor == 0 {
		return noop(ctx, ledger.KindPayment, p.Merchant, p.Currency, "zero amount")
	}
	return post(ctx, run, p)
}

func shopifyPayment(run Run) (ledger.Posting, error) {
	env := run.Envelope
	var o struct {
		ID                  json.RawMessage `json:"id"`
		Name                string          `json:"name"`
		Currency            string          `json:"currency"`
		PresentmentCurrency string          `json:"presentment_currency"`
		TotalPrice          string          `json:"total_price"`
		TotalPriceSet       struct {
			PresentmentMoney struct {
				Amount       string `json:"amount"`
				CurrencyCode string `json:"currency_code"`
			} `json:"presentment_money"`
		} `json:"total_price_set"`
	}
	if err := decodePayload(env, &o); err != nil {
		return ledger.Posting{}, err
	}
	id, err := jsonID(o.ID, "id")
	if err != nil {
		return ledger.Posting{}, err
	}
	currency := o.Currency
	if currency == "" {
		currency = o.PresentmentCurrency
	}
	if currency == "" {
		return ledger.Posting{}, missing("currency")
	}
	currency = currencyCode(currency)
	if o.TotalPrice == "" {
		return ledger.Posting{}, missing("total_price")
	}
	amount, err := ledger.ParseDecimal(o.TotalPrice, currency)
	if err != nil {
		return ledger.Posting{}, fmt.Errorf("total_price: %w", err)
	}
	p := ledger.Posting{
		Kind:           ledger.KindPayment,
		IdempotencyKey: shopifyOrderKey(id),
		Merchant:       shopifyMerchant(run),
		Currency:       currency,
		AmountMinor:    amount,
		Description:    fmt.Sprintf("shopify orders/paid %s %s", id, o.Name),
	}
	// An order presented in another currency than the shop's: its refunds
	// come in that currency, so the payment records what it was presented
	// as (total_price_set.presentment_money).
	pm := o.TotalPriceSet.PresentmentMoney
	if pc := currencyCode(pm.CurrencyCode); pc != "" && pc != currency && pm.Amount != "" {
		pres, err := ledger.ParseDecimal(pm.Amount, pc)
		if err != nil {
			return ledger.Posting{}, fmt.Errorf("total_price_set.presentment_money.amount: %w", err)
		}
		if pres > 0 {
			p.Presentment = &ledger.Money{Currency: pc, AmountMinor: pres}
		}
	}
	return p, nil
}

// shopifyRefundCreated posts the sum of the refund's successful or pending
// "refund" transactions as a refund of its order, keyed by the refund id, for the shop
// (see shopifyMerchant). A refund with no money moved (a restock-only refund) is a
// no-op. Refund transactions are in the order's presentment currency; when
// that is not the currency the payment was posted in (the shop's), the refund
// is posted in the payment's currency at the order's own rate (its shop total
// over its presentment total), cumulatively, so refunds that add up to the
// whole order add up to the whole payment exactly; the presentment amount is
// recorded next to it.
func shopifyRefundCreated(ctx context.Context, run Run) (json.RawMessage, error) {
	env := run.Envelope
	p, err := shopifyRefund(run)
	if err != nil {
		return nil, invalidPayload(fmt.Errorf("shopify %s: %w", env.EventType, err))
	}
	if p.AmountMinor == 0 {
		return noop(ctx, ledger.KindRefund, p.Merchant, p.Currency, "nothing refunded")
	}
	if res, ok, err := replayed(ctx, run); err != nil || ok {
		return res, err
	}
	if t, ok, err := ledger.ByKey(ctx, run.Tx, p.IdempotencyKey); err != nil {
		return nil, err
	} else if ok {
		return postingResult(ctx, PostingResult{LedgerTransactionID: t.ID, Kind: string(t.Kind), IdempotencyKey: t.IdempotencyKey, Merchant: t.Merchant,
			AmountMinor: t.AmountMinor, Currency: t.Currency, Reason: fmt.Sprintf("business key already posted by envelope %d", t.EnvelopeID)})
	}
	pay, err := ledger.Payment(ctx, run.Tx, p.PaymentKey)
	if err != nil {
		return nil, classify(fmt.Errorf("shopify %s: %w", env.EventType, err))
	}
	if p.Currency != pay.Currency && pay.Presentment != nil && p.Currency == pay.Presentment.Currency {
		if err := inPaymentCurrency(&p, pay); err != nil {
			return nil, invalidPayload(fmt.Errorf("shopify %s: %w", env.EventType, err))
		}
		if p.AmountMinor == 0 {
			return noop(ctx, ledger.KindRefund, p.Merchant, p.Currency, "refund rounds to zero in the payment's currency")
		}
	}
	return post(ctx, run, p)
}

// inPaymentCurrency converts a refund stated in the payment's presentment
// currency into the payment's currency: the refunds' presentment total after
// this one, at the payment's rate (rounded half up), less what the ledger
// has refunded, so rounding never accumulates.
func inPaymentCurrency(p *ledger.Posting, pay ledger.PaymentState) error {
	pres := *pay.Presentment
	after := pay.RefundedPresentmentMinor + p.AmountMinor
	if p.AmountMinor > pres.AmountMinor || after > pres.AmountMinor {
		return &ledger.PostingError{Key: p.IdempotencyKey, Reason: fmt.Sprintf(
			"over-refund: %d %s requested, payment %q has %d of %d %s left", p.AmountMinor, p.Currency, p.PaymentKey,
			pres.AmountMinor-pay.RefundedPresentmentMinor, pres.AmountMinor, pres.Currency)}
	}
	// after <= pres.AmountMinor, so after*AmountMinor/pres.AmountMinor <=
	// AmountMinor: the quotient fits, and Div64 cannot overflow.
	hi, lo := bits.Mul64(uint64(after), uint64(pay.AmountMinor))
	q, r := bits.Div64(hi, lo, uint64(pres.AmountMinor))
	if r >= uint64(pres.AmountMinor)-r { // r/d >= 1/2
		q++
	}
	shopAfter := int64(q)
	p.Presentment = &ledger.Money{Currency: p.Currency, AmountMinor: p.AmountMinor}
	p.Currency = pay.Currency
	p.AmountMinor = max(min(shopAfter-pay.RefundedMinor, pay.RefundableMinor()), 0)
	p.Description += fmt.Sprintf(" (%d %s presented)", p.Presentment.AmountMinor, p.Presentment.Currency)
	return nil
}

func shopifyRefund(run Run) (ledger.Posting, error) {
	env := run.Envelope
	var r struct {
		ID           json.RawMessage `json:"id"`
		OrderID      json.RawMessage `json:"order_id"`
		Transactions []struct {
			Kind     string `json:"kind"`
			Status   string `json:"status"`
			Amount   string `json:"amount"`
			Currency string `json:"currency"`
		} `json:"transactions"`
	}
	if err := decodePayload(env, &r); err != nil {
		return ledger.Posting{}, err
	}
	id, err := jsonID(r.ID, "id")
	if err != nil {
		return ledger.Posting{}, err
	}
	orderID, err := jsonID(r.OrderID, "order_id")
	if err != nil {
		return ledger.Posting{}, err
	}
	var currency string
	var total int64
	for i, t := range r.Transactions {
		// Shopify Payments reports a refund it has accepted but not yet
		// settled as "pending" ("Refund submitted and processing"); Shopify
		// counts it as refunded, and so does the ledger. Failed and errored
		// refund transactions moved no money.
		if t.Kind != "refund" || (t.Status != "success" && t.Status != "pending") {
			continue
		}
		if t.Currency == "" {
			return ledger.Posting{}, missing(fmt.Sprintf("transactions[%d].currency", i))
		}
		c := currencyCode(t.Currency)
		if currency != "" && c != currency {
			return ledger.Posting{}, fmt.Errorf("refund transactions in both %s and %s", currency, c)
		}
		currency = c
		amount, err := ledger.ParseDecimal(t.Amount, c)
		if err != nil {
			return ledger.Posting{}, fmt.Errorf("transactions[%d].amount: %w", i, err)
		}
		if amount > math.MaxInt64-total {
			return ledger.Posting{}, &ledger.AmountError{Amount: t.Amount, Currency: c, Reason: "refund total too large"}
		}
		total += amount
	}
	return ledger.Posting{
		Kind:           ledger.KindRefund,
		IdempotencyKey: shopifyRefundKey(id),
		PaymentKey:     shopifyOrderKey(orderID),
		Merchant:       shopifyMerchant(run),
		Currency:       currency,
		AmountMinor:    total,
		Description:    fmt.Sprintf("shopify refunds/create %s of order %s", id, orderID),
	}, nil
}

// shopifyEventIDHeader names the event a Shopify delivery carries; one event
// may arrive under several X-Shopify-Webhook-Id values.
const shopifyEventIDHeader = "X-Shopify-Event-Id"

// DuplicateResult is the result of an envelope that repeats an event
// another envelope of its source already carries (Shopify: the same
// X-Shopify-Event-Id under another X-Shopify-Webhook-Id). Nothing ran for it:
// no posting, no forwarding.
type DuplicateResult struct {
	DuplicateOf int64  `json:"duplicate_of"`
	Reason      string `json:"reason"`
}

// ShopifyEventOnce runs next only for the first envelope of its source
// that carries its X-Shopify-Event-Id: a Shopify delivery repeating an
// earlier one's event (under another X-Shopify-Webhook-Id) is a done no-op
// naming the first, whatever the first's status (replay the first to
// process the event again), neither posted nor forwarded again. Other
// envelopes run next as they are.
func ShopifyEventOnce(next Handler) Handler {
	return HandlerFunc(func(ctx context.Context, run Run) (json.RawMessage, error) {
		env := run.Envelope
		if env.Provider != provider.Shopify {
			return next.Handle(ctx, run)
		}
		eventID := header(env, shopifyEventIDHeader)
		if eventID == "" {
			return next.Handle(ctx, run)
		}
		first, ok, err := envelope.FirstOfShopifyEvent(ctx, run.Tx, env.Source, eventID, env.ID)
		if err != nil {
			return nil, err
		}
		if ok {
			return EncodeResult(DuplicateResult{DuplicateOf: first, Reason: fmt.Sprintf(
				"same %s as envelope %d: the event is processed once", shopifyEventIDHeader, first)})
		}
		return next.Handle(ctx, run)
	})
}
