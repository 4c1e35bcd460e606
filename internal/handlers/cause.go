package handlers

import (
	"context"
	"errors"
	"net"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/inboxhq/inbox/internal/labels"
	"github.com/inboxhq/inbox/internal/ledger"
)

// causeError attaches a labels.Cause to an error; it changes neither its message
// nor its classification (errors.As still finds a *PermanentError inside).
type causeError struct {
	err   error
	cause labels.Cause
}

func (e *causeError) Error() string { return errorText(e.err) }
func (e *causeError) Unwrap() error { return e.err }

// WithCause returns err with cause attached: CauseOf returns it, whatever
// the error's kind. It returns nil for nil. The outermost cause wins.
func WithCause(err error, cause labels.Cause) error {
	if err == nil {
		return nil
	}
	return &causeError{err: err, cause: cause}
}

// CauseOf returns err's cause: the outermost one attached by WithCause, else
// one derived from the error's kind (the ledger's errors, deadlines, the
// database, then the classification: retry_after, not_ready, permanent),
// else labels.CauseInternal. It returns "" for nil.
func CauseOf(err error) labels.Cause {
	if err == nil {
		return ""
	}
	var ce *causeError
	if errors.As(err, &ce) {
		return ce.cause
	}
	return derivedCause(err)
}

func derivedCause(err error) labels.Cause {
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
		return labels.CauseUnknownCurrency
	case errors.Is(err, ledger.ErrInvalidAmount):
		return labels.CauseInvalidAmount
	case errors.As(err, &pe):
		return labels.CausePostingRejected
	case errors.Is(err, ledger.ErrPaymentNotPosted):
		return labels.CausePaymentNotPosted
	case errors.Is(err, ledger.ErrRefundNotPosted):
		return labels.CauseRefundNotPosted
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return labels.CauseTimeout
	case errors.Is(err, context.Canceled):
		return labels.CauseCanceled
	case errors.As(err, &pg):
		return labels.CauseDatabase
	case errors.As(err, &ra):
		return labels.CauseRetryAfter
	case errors.As(err, &nr):
		return labels.CauseNotReady
	case errors.As(err, &perm):
		return labels.CausePermanent
	default:
		return labels.CauseInternal
	}
}

// invalidPayload marks err permanent with labels.CauseInvalidPayload, unless its
// kind says more (an unknown currency, an invalid amount): the payment
// handlers' decoding errors.
func invalidPayload(err error) error {
	if err == nil {
		return nil
	}
	switch derivedCause(err) {
	case labels.CauseInternal, labels.CausePermanent:
		err = WithCause(err, labels.CauseInvalidPayload)
	}
	return Permanent(err)
}
