package handlers

import (
	"context"
	"errors"
	"net"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/inboxhq/inbox/internal/ledger"
)

// Cause is a failed attempt's stable, low-cardinality reason code, stored in
// envelope_attempt.cause and envelope.last_cause next to the message (which
// carries ids and amounts) and used as a metric label. Codes are never
// renamed: queries, alerts and replays select by them.
type Cause string

// Causes. A handler attaches one with WithCause; CauseOf derives the others
// from the error's kind.
const (
	CauseUnknownCurrency    Cause = "unknown_currency"    // ledger.ErrUnknownCurrency
	CauseInvalidAmount      Cause = "invalid_amount"      // ledger.ErrInvalidAmount, *ledger.AmountError
	CausePostingRejected    Cause = "posting_rejected"    // *ledger.PostingError: over-refund, currency mismatch, key reused
	CausePaymentNotPosted   Cause = "payment_not_posted"  // ledger.ErrPaymentNotPosted: a refund before its payment
	CauseRefundNotPosted    Cause = "refund_not_posted"   // ledger.ErrRefundNotPosted: a reversal before its refund
	CauseInvalidPayload     Cause = "invalid_payload"     // the body lacks a field or does not decode
	CauseForward3xx         Cause = "forward_3xx"         // the destination redirected (not followed)
	CauseForward4xx         Cause = "forward_4xx"         // the destination refused (408 and 429 are retried)
	CauseForward5xx         Cause = "forward_5xx"         // the destination failed
	CauseForwardUnreachable Cause = "forward_unreachable" // no response: connection refused, DNS, TLS
	CauseTimeout            Cause = "timeout"             // a deadline passed (context.DeadlineExceeded, a network timeout)
	CauseCanceled           Cause = "canceled"            // the attempt's context ended (worker shutdown)
	CauseRetryAfter         Cause = "retry_after"         // *RetryAfterError without a more specific cause
	CauseNotReady           Cause = "not_ready"           // *NotReadyError without a more specific cause
	CauseThrottled          Cause = "throttled"           // the source's throttle refused a slot (set by the worker)
	CausePermanent          Cause = "permanent"           // *PermanentError without a more specific cause
	CauseDatabase           Cause = "database"            // a PostgreSQL error
	CausePanic              Cause = "panic"               // the handler panicked (set by the worker)
	CauseOrphaned           Cause = "orphaned"            // its job ended without a recorded outcome (failed by the reconcile)
	CauseInternal           Cause = "internal"            // anything else
)

// Causes lists every Cause, for zero-initialised metric series and input
// validation (the --cause flags).
var Causes = []Cause{
	CauseUnknownCurrency, CauseInvalidAmount, CausePostingRejected, CausePaymentNotPosted, CauseRefundNotPosted,
	CauseInvalidPayload, CauseForward3xx, CauseForward4xx, CauseForward5xx, CauseForwardUnreachable,
	CauseTimeout, CauseCanceled, CauseRetryAfter, CauseNotReady, CauseThrottled, CausePermanent,
	CauseDatabase, CausePanic, CauseOrphaned, CauseInternal,
}

// KnownCause reports whether c is one of Causes.
func KnownCause(c Cause) bool {
	for _, k := range Causes {
		if k == c {
			return true
		}
	}
	return false
}

// causeError attaches a Cause to an error; it changes neither its message
// nor its classification (errors.As still finds a *PermanentError inside).
type causeError struct {
	err   error
	cause Cause
}

func (e *causeError) Error() string { return errorText(e.err) }
func (e *causeError) Unwrap() error { return e.err }

// WithCause returns err with cause attached: CauseOf returns it, whatever
// the error's kind. It returns nil for nil. The outermost cause wins.
func WithCause(err error, cause Cause) error {
	if err == nil {
		return nil
	}
	return &causeError{err: err, cause: cause}
}

// CauseOf returns err's cause: the outermost one attached by WithCause, else
// one derived from the error's kind (the ledger's errors, deadlines, the
// database, then the classification: retry_after, not_ready, permanent),
// else CauseInternal. It returns "" for nil.
func CauseOf(err error) Cause {
	if err == nil {
		return ""
	}
	var ce *causeError
	if errors.As(err, &ce) {
		return ce.cause
	}
	return derivedCause(err)
}

func derivedCause(err error) Cause {
	var (
		pe   *ledger.PostingError
		pg   *pgconn.PgError
		ne   net.Error
		ra   *RetryAfterError
		nr   *NotReadyError
		perm *PermanentError
	)
	switch {
	case errors.Is(err, ledger.ErrUnknownCurrency):
		return CauseUnknownCurrency
	case errors.Is(err, ledger.ErrInvalidAmount):
		return CauseInvalidAmount
	case errors.As(err, &pe):
		return CausePostingRejected
	case errors.Is(err, ledger.ErrPaymentNotPosted):
		return CausePaymentNotPosted
	case errors.Is(err, ledger.ErrRefundNotPosted):
		return CauseRefundNotPosted
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return CauseTimeout
	case errors.Is(err, context.Canceled):
		return CauseCanceled
	case errors.As(err, &pg):
		return CauseDatabase
	case errors.As(err, &ra):
		return CauseRetryAfter
	case errors.As(err, &nr):
		return CauseNotReady
	case errors.As(err, &perm):
		return CausePermanent
	default:
		return CauseInternal
	}
}

// invalidPayload marks err permanent with CauseInvalidPayload, unless its
// kind says more (an unknown currency, an invalid amount): the payment
// handlers' decoding errors.
func invalidPayload(err error) error {
	if err == nil {
		return nil
	}
	switch derivedCause(err) {
	case CauseInternal, CausePermanent:
		err = WithCause(err, CauseInvalidPayload)
	}
	return Permanent(err)
}
