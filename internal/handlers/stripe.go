package handlers

import (
	"context"
	"encoding/json"
	"fmt"
	"math"

	"github.com/jackc/pgx/v5"

	"github.com/inboxhq/inbox/internal/envelope"
	"github.com/inboxhq/inbox/internal/ledger"
)

// stripeEvent is the envelope of every Stripe event.
type stripeEvent struct {
	ID      string `json:"id"`
	Type    string `json:"type"`
	Account string `json:"account"` // the connected account, for Connect events
	Data    struct {
		Object json.RawMessage `json:"object"`
	} `json:"data"`
}

// decodeStripe decodes the event and its data.object into obj.
func decodeStripe(env *envelope.Envelope, obj any) (stripeEvent, error) {
	var ev stripeEvent
	if err := decodePayload(env, &ev); err != nil {
		return ev, err
	}
	if len(ev.Data.Object) == 0 || string(ev.Data.Object) == "null" {
		return ev, missing("data.object")
	}
	if err := json.Unmarshal(ev.Data.Object, obj); err != nil {
		return ev, fmt.Errorf("decode data.object: %w", err)
	}
	return ev, nil
}

// merchant is the Connect account, else the source.
func (ev stripeEvent) merchant(env *envelope.Envelope) string {
	if ev.Account != "" {
		return ev.Account
	}
	return env.Source
}

func stripePaymentKey(paymentIntentID string) string { return "stripe:payment:" + paymentIntentID }

// stripePaymentIntentSucceeded posts data.object.amount_received as a payment
// keyed by the PaymentIntent id.
func stripePaymentIntentSucceeded(ctx context.Context, tx pgx.Tx, env *envelope.Envelope) (json.RawMessage, error) {
	p, err := stripePayment(env)
	if err != nil {
		return nil, Permanent(fmt.Errorf("stripe %s: %w", env.EventType, err))
	}
	return post(ctx, tx, env, p)
}

func stripePayment(env *envelope.Envelope) (ledger.Posting, error) {
	var pi struct {
		ID             string          `json:"id"`
		Object         string          `json:"object"`
		AmountReceived json.RawMessage `json:"amount_received"`
		Currency       string          `json:"currency"`
	}
	ev, err := decodeStripe(env, &pi)
	if err != nil {
		return ledger.Posting{}, err
	}
	if pi.Object != "" && pi.Object != "payment_intent" {
		return ledger.Posting{}, fmt.Errorf("data.object is a %q, want a payment_intent", pi.Object)
	}
	if pi.ID == "" {
		return ledger.Posting{}, missing("data.object.id")
	}
	amount, err := jsonInt(pi.AmountReceived, "data.object.amount_received")
	if err != nil {
		return ledger.Posting{}, err
	}
	if pi.Currency == "" {
		return ledger.Posting{}, missing("data.object.currency")
	}
	currency := currencyCode(pi.Currency)
	minor, err := stripeToMinor(amount, currency)
	if err != nil {
		return ledger.Posting{}, err
	}
	return ledger.Posting{
		Kind:           ledger.KindPayment,
		IdempotencyKey: stripePaymentKey(pi.ID),
		Merchant:       ev.merchant(env),
		Currency:       currency,
		AmountMinor:    minor,
		Description:    fmt.Sprintf("stripe payment_intent.succeeded %s (event %s)", pi.ID, ev.ID),
	}, nil
}

// stripeChargeRefunded posts the part of data.object.amount_refunded, which
// Stripe reports cumulatively per charge, that the ledger does not hold yet
// for the charge's PaymentIntent. Events may arrive in any order: an event
// whose cumulative amount is already covered is a no-op, so the ledger ends
// at the largest cumulative amount seen. The refund's key carries the
// cumulative amount, so each step posts once.
func stripeChargeRefunded(ctx context.Context, tx pgx.Tx, env *envelope.Envelope) (json.RawMessage, error) {
	r, err := stripeRefund(env)
	if err != nil {
		return nil, Permanent(fmt.Errorf("stripe %s: %w", env.EventType, err))
	}

	// A replayed envelope reports what it posted the first time, rather than
	// "nothing new refunded".
	if t, ok, err := ledger.ByEnvelope(ctx, tx, env.ID); err != nil {
		return nil, err
	} else if ok {
		return marshal(PostingResult{
			LedgerTransactionID: t.ID, Kind: string(t.Kind), IdempotencyKey: t.IdempotencyKey, Merchant: t.Merchant,
			AmountMinor: t.AmountMinor, Currency: t.Currency, Reason: ledger.ReasonEnvelopePosted,
		})
	}

	// Locks the payment until the transaction ends: concurrent refund events
	// of one payment compute their deltas one after the other.
	pay, err := ledger.Payment(ctx, tx, r.PaymentKey)
	if err != nil {
		return nil, classify(fmt.Errorf("stripe %s %s: %w", env.EventType, r.chargeID, err))
	}
	if pay.Currency != r.Currency {
		// Checked here as well as by ledger.Post, which a zero delta would skip.
		return nil, Permanent(&ledger.PostingError{Key: r.IdempotencyKey, Reason: fmt.Sprintf(
			"refund currency %s differs from payment %q currency %s", r.Currency, r.PaymentKey, pay.Currency)})
	}
	r.AmountMinor = r.cumulativeMinor - pay.RefundedMinor
	if r.AmountMinor <= 0 {
		return noop(ledger.KindRefund, r.Merchant, r.Currency, "nothing new refunded")
	}
	return post(ctx, tx, env, r.Posting)
}

// stripeRefundEvent is a charge.refunded event, parsed; its Posting lacks
// the amount, which depends on the ledger.
type stripeRefundEvent struct {
	ledger.Posting
	chargeID        string
	cumulativeMinor int64 // amount_refunded in ISO minor units
}

func stripeRefund(env *envelope.Envelope) (stripeRefundEvent, error) {
	var ch struct {
		ID             string          `json:"id"`
		Object         string          `json:"object"`
		AmountRefunded json.RawMessage `json:"amount_refunded"`
		Currency       string          `json:"currency"`
		PaymentIntent  *string         `json:"payment_intent"`
	}
	ev, err := decodeStripe(env, &ch)
	if err != nil {
		return stripeRefundEvent{}, err
	}
	switch {
	case ch.Object != "" && ch.Object != "charge":
		return stripeRefundEvent{}, fmt.Errorf("data.object is a %q, want a charge", ch.Object)
	case ch.ID == "":
		return stripeRefundEvent{}, missing("data.object.id")
	case ch.PaymentIntent == nil || *ch.PaymentIntent == "":
		return stripeRefundEvent{}, missing("data.object.payment_intent")
	case ch.Currency == "":
		return stripeRefundEvent{}, missing("data.object.currency")
	}
	cumulative, err := jsonInt(ch.AmountRefunded, "data.object.amount_refunded")
	if err != nil {
		return stripeRefundEvent{}, err
	}
	currency := currencyCode(ch.Currency)
	cumulativeMinor, err := stripeToMinor(cumulative, currency)
	if err != nil {
		return stripeRefundEvent{}, err
	}
	return stripeRefundEvent{
		Posting: ledger.Posting{
			Kind:           ledger.KindRefund,
			IdempotencyKey: fmt.Sprintf("stripe:refund:%s:%d", ch.ID, cumulative),
			PaymentKey:     stripePaymentKey(*ch.PaymentIntent),
			Merchant:       ev.merchant(env),
			Currency:       currency,
			Description:    fmt.Sprintf("stripe charge.refunded %s of %s, cumulative %d (event %s)", ch.ID, *ch.PaymentIntent, cumulative, ev.ID),
		},
		chargeID:        ch.ID,
		cumulativeMinor: cumulativeMinor,
	}, nil
}

// Stripe's own exponents: amounts are in "the smallest currency unit", which
// is two decimals unless Stripe lists the currency as zero- or
// three-decimal (https://docs.stripe.com/currencies). They differ from ISO
// 4217 for ISK (two-decimal at Stripe, amounts multiples of 100) and MGA
// (zero-decimal at Stripe).
var (
	stripeZeroDecimal = map[string]bool{
		"BIF": true, "CLP": true, "DJF": true, "GNF": true, "JPY": true, "KMF": true, "KRW": true, "MGA": true,
		"PYG": true, "RWF": true, "UGX": true, "VND": true, "VUV": true, "XAF": true, "XOF": true, "XPF": true,
	}
	stripeThreeDecimal = map[string]bool{"BHD": true, "JOD": true, "KWD": true, "OMR": true, "TND": true}
)

// stripeToMinor converts a Stripe amount to ISO 4217 minor units, exactly:
// a Stripe amount that is not a whole number of ISO minor units is refused.
func stripeToMinor(amount int64, currency string) (int64, error) {
	iso, ok := ledger.Exponent(currency)
	if !ok {
		return 0, fmt.Errorf("%w %q", ledger.ErrUnknownCurrency, currency)
	}
	exp := 2
	if stripeZeroDecimal[currency] {
		exp = 0
	} else if stripeThreeDecimal[currency] {
		exp = 3
	}
	bad := func(reason string) error {
		return &ledger.AmountError{Amount: fmt.Sprint(amount), Currency: currency, Reason: reason}
	}
	if amount < 0 {
		return 0, bad("negative")
	}
	f := int64(1)
	for range max(exp-iso, iso-exp) {
		f *= 10
	}
	switch {
	case exp > iso:
		if amount%f != 0 {
			return 0, bad(fmt.Sprintf("Stripe amount is not a whole number of %s minor units", currency))
		}
		return amount / f, nil
	case exp < iso:
		if amount > math.MaxInt64/f {
			return 0, bad("too large")
		}
		return amount * f, nil
	default:
		return amount, nil
	}
}
