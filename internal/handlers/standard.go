package handlers

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/inboxhq/inbox/internal/ledger"
)

// standardPayment is the data of a Standard Webhooks payment event. Amounts
// are already in ISO 4217 minor units.
type standardPayment struct {
	PaymentID   string          `json:"payment_id"`
	RefundID    string          `json:"refund_id"`
	MerchantID  string          `json:"merchant_id"`
	AmountMinor json.RawMessage `json:"amount_minor"`
	Currency    string          `json:"currency"`
}

// standardPaymentSucceeded posts data.amount_minor as a payment keyed by the
// merchant and data.payment_id.
func standardPaymentSucceeded(ctx context.Context, run Run) (json.RawMessage, error) {
	env := run.Envelope
	p, err := standardPosting(run, ledger.KindPayment)
	if err != nil {
		return nil, invalidPayload(fmt.Errorf("standard %s: %w", env.EventType, err))
	}
	return post(ctx, run, p)
}

// standardPaymentRefunded posts data.amount_minor as a refund of
// data.payment_id, keyed by the merchant and data.refund_id.
func standardPaymentRefunded(ctx context.Context, run Run) (json.RawMessage, error) {
	env := run.Envelope
	p, err := standardPosting(run, ledger.KindRefund)
	if err != nil {
		return nil, invalidPayload(fmt.Errorf("standard %s: %w", env.EventType, err))
	}
	return post(ctx, run, p)
}

func standardPosting(run Run, kind ledger.Kind) (ledger.Posting, error) {
	env := run.Envelope
	var ev struct {
		Type string           `json:"type"`
		Data *standardPayment `json:"data"`
	}
	if err := decodePayload(env, &ev); err != nil {
		return ledger.Posting{}, err
	}
	d := ev.Data
	switch {
	case d == nil:
		return ledger.Posting{}, missing("data")
	case d.PaymentID == "":
		return ledger.Posting{}, missing("data.payment_id")
	case kind == ledger.KindRefund && d.RefundID == "":
		return ledger.Posting{}, missing("data.refund_id")
	case d.Currency == "":
		return ledger.Posting{}, missing("data.currency")
	}
	amount, err := jsonInt(d.AmountMinor, "data.amount_minor")
	if err != nil {
		return ledger.Posting{}, err
	}
	merchant := merchant(d.MerchantID, run.Account, env.Source)
	p := ledger.Posting{
		Kind:        kind,
		PaymentKey:  fmt.Sprintf("standard:%s:payment:%s", merchant, d.PaymentID),
		Merchant:    merchant,
		Currency:    currencyCode(d.Currency),
		AmountMinor: amount,
	}
	if kind == ledger.KindPayment {
		p.IdempotencyKey = p.PaymentKey
		p.Description = fmt.Sprintf("standard %s %s (delivery %s)", env.EventType, d.PaymentID, env.DeliveryID)
	} else {
		p.IdempotencyKey = fmt.Sprintf("standard:%s:refund:%s", merchant, d.RefundID)
		p.Description = fmt.Sprintf("standard %s %s of %s (delivery %s)", env.EventType, d.RefundID, d.PaymentID, env.DeliveryID)
	}
	return p, nil
}
