package handlers

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"strings"

	"github.com/inboxhq/inbox/internal/envelope"
	"github.com/inboxhq/inbox/internal/ledger"
)

// stripeEvent is the envelope of every Stripe event.
type stripeEvent struct {
	ID         string `json:"id"`
	Type       string `json:"type"`
	APIVersion string `json:"api_version"`
	Account    string `json:"account"` // the connected account, for Connect events
	Data       struct {
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

// merchant is the Stripe account the event belongs to: the Connect account
// the event names, else the account configured for the source (account_id),
// else the source name (see merchant).
func (ev stripeEvent) merchant(run Run) string {
	return merchant(ev.Account, run.Account, run.Envelope.Source)
}

// stripeBasil is the first API version (2025-03-31.basil) in which a partial
// capture no longer creates a Refund for the uncaptured amount, nor counts
// it in the charge's amount_refunded.
const stripeBasil = "2025-03-31"

// releasesCountAsRefunds reports whether, at the event's API version, the
// amount an authorization released (uncaptured) is counted in
// amount_refunded: before basil it is. Versions are dated, so they compare as
// strings; an event without one is taken as older.
func (ev stripeEvent) releasesCountAsRefunds() bool {
	v, _, _ := strings.Cut(ev.APIVersion, ".")
	return v < stripeBasil
}

func stripePaymentKey(paymentIntentID string) string { return "stripe:payment:" + paymentIntentID }

// stripePaymentIntentSucceeded posts data.object.amount_received as a payment
// keyed by the PaymentIntent id.
func stripePaymentIntentSucceeded(ctx context.Context, run Run) (json.RawMessage, error) {
	env := run.Envelope
	p, err := stripePayment(run)
	if err != nil {
		return nil, invalidPayload(fmt.Errorf("stripe %s: %w", env.EventType, err))
	}
	return post(ctx, run, p)
}

func stripePayment(run Run) (ledger.Posting, error) {
	env := run.Envelope
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
		Merchant:       ev.merchant(run),
		Currency:       currency,
		AmountMinor:    minor,
		Description:    fmt.Sprintf("stripe payment_intent.succeeded %s (event %s)", pi.ID, ev.ID),
	}, nil
}

// stripeChargeRefunded posts the part of the charge's refunded amount that
// the ledger does not hold yet for the charge's PaymentIntent. Stripe reports
// amount_refunded cumulatively per charge; before API version basil it also
// counts the amount a partial capture released (authorized 1000, captured
// 600: amount_refunded 400 with no refund at all), so the refunded amount is
// amount_refunded less (amount - amount_captured) there. A charge that was
// never captured (an authorization cancelled or expired) has refunded
// nothing: a no-op with that reason, whether or not its payment is in the
// ledger. Events may arrive in any order: an event whose amount is already
// covered is a no-op, so the ledger ends at the largest amount seen. A refund
// that later fails is reversed by stripeRefundUpdated, and the amount the
// charge then reports is lower; the refund's key carries the event id, so a
// refund after a failed one posts too. The refund is posted for the
// payment's merchant: a PaymentIntent id names one payment across Stripe.
func stripeChargeRefunded(ctx context.Context, run Run) (json.RawMessage, error) {
	env := run.Envelope
	r, err := stripeRefund(run)
	if err != nil {
		return nil, invalidPayload(fmt.Errorf("stripe %s: %w", env.EventType, err))
	}
	if r.uncaptured {
		return noop(ctx, ledger.KindRefund, r.Merchant, r.Currency, "authorization released, never captured: not a refund")
	}

	// A replayed envelope reports what it posted the first time, rather than
	// "nothing new refunded".
	if res, ok, err := replayed(ctx, run); err != nil || ok {
		return res, err
	}

	// Locks the payment until the transaction ends: concurrent refund events
	// of one payment compute their deltas one after the other.
	pay, err := ledger.Payment(ctx, run.Tx, r.PaymentKey)
	if err != nil {
		return nil, classify(fmt.Errorf("stripe %s %s: %w", env.EventType, r.chargeID, err))
	}
	if pay.Currency != r.Currency {
		// Checked here as well as by ledger.Post, which a zero delta would skip.
		return nil, Permanent(&ledger.PostingError{Key: r.IdempotencyKey, Reason: fmt.Sprintf(
			"refund currency %s differs from payment %q currency %s", r.Currency, r.PaymentKey, pay.Currency)})
	}
	r.Merchant = pay.Merchant
	r.AmountMinor = r.refundedMinor - pay.RefundedMinor
	if r.AmountMinor <= 0 {
		return noop(ctx, ledger.KindRefund, r.Merchant, r.Currency, "nothing new refunded")
	}
	return post(ctx, run, r.Posting)
}

// replayed returns the result of an envelope that already has its ledger
// transaction (a replay, or a retry after a crash).
func replayed(ctx context.Context, run Run) (json.RawMessage, bool, error) {
	t, ok, err := ledger.ByEnvelope(ctx, run.Tx, run.Envelope.ID)
	if err != nil || !ok {
		return nil, false, err
	}
	res, err := postingResult(ctx, PostingResult{
		LedgerTransactionID: t.ID, Kind: string(t.Kind), IdempotencyKey: t.IdempotencyKey, Merchant: t.Merchant,
		AmountMinor: t.AmountMinor, Currency: t.Currency, Reason: ledger.ReasonEnvelopePosted,
	})
	return res, true, err
}

// stripeRefundEvent is a charge.refunded event, parsed; its Posting lacks
// the amount, which depends on the ledger.
type stripeRefundEvent struct {
	ledger.Posting
	chargeID      string
	refundedMinor int64 // what the charge has refunded, in ISO minor units
	uncaptured    bool  // the charge was never captured: nothing to refund
}

func stripeRefund(run Run) (stripeRefundEvent, error) {
	env := run.Envelope
	var ch struct {
		ID             string          `json:"id"`
		Object         string          `json:"object"`
		Amount         json.RawMessage `json:"amount"`
		AmountCaptured json.RawMessage `json:"amount_captured"`
		AmountRefunded json.RawMessage `json:"amount_refunded"`
		Captured       *bool           `json:"captured"`
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
	case ch.Currency == "":
		return stripeRefundEvent{}, missing("data.object.currency")
	}
	currency := currencyCode(ch.Currency)
	out := stripeRefundEvent{Posting: ledger.Posting{Kind: ledger.KindRefund, Merchant: ev.merchant(run), Currency: currency}, chargeID: ch.ID}
	if ch.Captured != nil && !*ch.Captured {
		out.uncaptured = true
		return out, nil
	}
	if ch.PaymentIntent == nil || *ch.PaymentIntent == "" {
		return stripeRefundEvent{}, missing("data.object.payment_intent")
	}
	refunded, err := jsonInt(ch.AmountRefunded, "data.object.amount_refunded")
	if err != nil {
		return stripeRefundEvent{}, err
	}
	if ev.releasesCountAsRefunds() && len(ch.AmountCaptured) > 0 && string(ch.AmountCaptured) != "null" {
		amount, err := jsonInt(ch.Amount, "data.object.amount")
		if err != nil {
			return stripeRefundEvent{}, err
		}
		captured, err := jsonInt(ch.AmountCaptured, "data.object.amount_captured")
		if err != nil {
			return stripeRefundEvent{}, err
		}
		if released := amount - captured; released > 0 {
			refunded = max(refunded-released, 0)
		}
	}
	refundedMinor, err := stripeToMinor(refunded, currency)
	if err != nil {
		return stripeRefundEvent{}, err
	}
	out.IdempotencyKey = fmt.Sprintf("stripe:refund:%s:%d:%s", ch.ID, refunded, ev.ID)
	out.PaymentKey = stripePaymentKey(*ch.PaymentIntent)
	out.Description = fmt.Sprintf("stripe charge.refunded %s of %s, refunded %d (event %s)", ch.ID, *ch.PaymentIntent, refunded, ev.ID)
	out.refundedMinor = refundedMinor
	return out, nil
}

// stripeRefundUpdated reverses a refund that failed (data.object is a
// Refund whose status is "failed": charge.refund.updated, refund.updated,
// refund.failed). Stripe returned the money to the balance, so the ledger
// takes the refund back, keyed by the refund id, for the payment's
// merchant. Any other status is a no-op. A failure that arrives before its
// refund is in the ledger waits (snoozes) for it.
func stripeRefundUpdated(ctx context.Context, run Run) (json.RawMessage, error) {
	env := run.Envelope
	var re struct {
		ID            string          `json:"id"`
		Object        string          `json:"object"`
		Amount        json.RawMessage `json:"amount"`
		Currency      string          `json:"currency"`
		Status        string          `json:"status"`
		PaymentIntent *string         `json:"payment_intent"`
	}
	ev, err := decodeStripe(env, &re)
	if err == nil {
		switch {
		case re.Object != "" && re.Object != "refund":
			err = fmt.Errorf("data.object is a %q, want a refund", re.Object)
		case re.ID == "":
			err = missing("data.object.id")
		case re.Currency == "":
			err = missing("data.object.currency")
		}
	}
	if err != nil {
		return nil, invalidPayload(fmt.Errorf("stripe %s: %w", env.EventType, err))
	}
	currency := currencyCode(re.Currency)
	if re.Status != "failed" {
		return noop(ctx, ledger.KindRefundReversal, ev.merchant(run), currency, fmt.Sprintf("refund %s is %s: nothing to reverse", re.ID, re.Status))
	}
	if re.PaymentIntent == nil || *re.PaymentIntent == "" {
		return nil, invalidPayload(fmt.Errorf("stripe %s: %w", env.EventType, missing("data.object.payment_intent")))
	}
	amount, err := jsonInt(re.Amount, "data.object.amount")
	if err == nil {
		amount, err = stripeToMinor(amount, currency)
	}
	if err != nil {
		return nil, invalidPayload(fmt.Errorf("stripe %s: %w", env.EventType, err))
	}
	if res, ok, err := replayed(ctx, run); err != nil || ok {
		return res, err
	}
	p := ledger.Posting{
		Kind:           ledger.KindRefundReversal,
		IdempotencyKey: "stripe:refund_failed:" + re.ID,
		PaymentKey:     stripePaymentKey(*re.PaymentIntent),
		Currency:       currency,
		AmountMinor:    amount,
		Description:    fmt.Sprintf("stripe %s: refund %s of %s failed (event %s)", env.EventType, re.ID, *re.PaymentIntent, ev.ID),
	}
	pay, err := ledger.Payment(ctx, run.Tx, p.PaymentKey)
	if err != nil {
		return nil, classify(fmt.Errorf("stripe %s %s: %w", env.EventType, re.ID, err))
	}
	p.Merchant = pay.Merchant
	return post(ctx, run, p)
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
