package ledger

import (
	"errors"
	"strconv"
)

// ErrUnknownCurrency is returned, wrapped with the code, for a currency that is
// not an active ISO 4217 code in uppercase. It is permanent: retrying the same
// input cannot succeed.
var ErrUnknownCurrency = errors.New("unknown currency")

// ErrInvalidAmount is wrapped by every error about an amount (see
// AmountError). It is permanent.
var ErrInvalidAmount = errors.New("invalid amount")

// ErrPaymentNotPosted is returned, wrapped with the payment key, when a refund
// or a payment lookup names a payment the ledger does not hold (yet). It is the
// one ledger error that may clear up by itself: the payment's own event may
// still be on its way, so callers should retry later.
var ErrPaymentNotPosted = errors.New("payment not posted")

// ErrRefundNotPosted is returned, wrapped, when a refund reversal would take
// back more than the payment has had refunded: the refund it reverses is not
// in the ledger (yet). Like ErrPaymentNotPosted it may clear up by itself,
// when the refund's own event is processed.
var ErrRefundNotPosted = errors.New("refund to reverse not posted")

// AmountError says why an amount was refused. errors.Is(err,
// ErrInvalidAmount) holds for it.
type AmountError struct {
	Amount   string // the amount as given
	Currency string
	Reason   string
}

func (e *AmountError) Error() string {
	return "invalid amount " + quote(e.Amount) + " " + e.Currency + ": " + e.Reason
}

// Unwrap returns ErrInvalidAmount.
func (e *AmountError) Unwrap() error { return ErrInvalidAmount }

// PostingError says why a posting was refused: a malformed posting, a refund
// in another currency than its payment, an over-refund, or a business key
// already posted with different terms. It is permanent.
type PostingError struct {
	Key    string // the posting's idempotency key, when it has one
	Reason string
}

func (e *PostingError) Error() string {
	if e.Key == "" {
		return "posting rejected: " + e.Reason
	}
	return "posting " + quote(e.Key) + " rejected: " + e.Reason
}

func quote(s string) string {
	const max = 64
	if len(s) > max {
		s = s[:max] + "..."
	}
	return strconv.Quote(s)
}
