package handlers

import (
	"errors"
	"time"

	"github.com/inboxhq/inbox/internal/ledger"
)

// PermanentError marks a failure that retrying cannot fix: a bad payload, an
// unknown currency, an over-refund. The worker gives up on the envelope at
// once (status failed) and records the message.
type PermanentError struct{ Err error }

func (e *PermanentError) Error() string { return errorText(e.Err) }
func (e *PermanentError) Unwrap() error { return e.Err }

// NotReadyError marks a failure caused by a dependency that has not arrived
// yet (a refund before its payment). The worker snoozes the job, bounded,
// without spending an attempt.
type NotReadyError struct {
	Err  error
	Wait time.Duration // how long to wait; 0 means the worker's default
}

func (e *NotReadyError) Error() string { return errorText(e.Err) }
func (e *NotReadyError) Unwrap() error { return e.Err }

// RetryAfterError marks a failure where a downstream asked to be called again
// after a while (an HTTP Retry-After). The worker snoozes the job, bounded.
type RetryAfterError struct {
	Err   error
	After time.Duration
}

func (e *RetryAfterError) Error() string { return errorText(e.Err) }
func (e *RetryAfterError) Unwrap() error { return e.Err }

// Permanent wraps err in a *PermanentError. It returns nil for nil, and err
// itself when err already carries a classification.
func Permanent(err error) error {
	if err == nil || classified(err) {
		return err
	}
	return &PermanentError{Err: err}
}

// NotReady wraps err in a *NotReadyError with the worker's default wait. It
// returns nil for nil, and err itself when err already carries a
// classification.
func NotReady(err error) error {
	if err == nil || classified(err) {
		return err
	}
	return &NotReadyError{Err: err}
}

// RetryAfter wraps err in a *RetryAfterError. It returns nil for nil, and err
// itself when err already carries a classification.
func RetryAfter(err error, after time.Duration) error {
	if err == nil || classified(err) {
		return err
	}
	return &RetryAfterError{Err: err, After: after}
}

func classified(err error) bool {
	var p *PermanentError
	var n *NotReadyError
	var r *RetryAfterError
	return errors.As(err, &p) || errors.As(err, &n) || errors.As(err, &r)
}

func errorText(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}

// classify maps ledger errors to the classification the worker acts on: a
// missing payment is not ready; a bad currency, amount or posting is
// permanent; anything else (the database) stays a plain error, retried.
func classify(err error) error {
	var pe *ledger.PostingError
	switch {
	case err == nil:
		return nil
	case errors.Is(err, ledger.ErrPaymentNotPosted), errors.Is(err, ledger.ErrRefundNotPosted):
		return NotReady(err)
	case errors.Is(err, ledger.ErrUnknownCurrency), errors.Is(err, ledger.ErrInvalidAmount), errors.As(err, &pe):
		return Permanent(err)
	default:
		return err
	}
}
