package handlers_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/inboxhq/inbox/internal/handlers"
	"github.com/inboxhq/inbox/internal/ledger"
)

func TestCauseOf(t *testing.T) {
	t.Parallel()
	plain := errors.New("boom")
	for _, tt := range []struct {
		name string
		err  error
		want handlers.Cause
	}{
		{"nil", nil, ""},
		{"plain", plain, handlers.CauseInternal},
		{"unknown currency, permanent", handlers.Permanent(fmt.Errorf("post: %w %q", ledger.ErrUnknownCurrency, "XYZ")), handlers.CauseUnknownCurrency},
		{"invalid amount", handlers.Permanent(&ledger.AmountError{}), handlers.CauseInvalidAmount},
		{"posting rejected", handlers.Permanent(&ledger.PostingError{Reason: "over-refund"}), handlers.CausePostingRejected},
		{"payment not posted", handlers.NotReady(fmt.Errorf("refund: %w", ledger.ErrPaymentNotPosted)), handlers.CausePaymentNotPosted},
		{"refund not posted", handlers.NotReady(ledger.ErrRefundNotPosted), handlers.CauseRefundNotPosted},
		{"deadline", fmt.Errorf("call: %w", context.DeadlineExceeded), handlers.CauseTimeout},
		{"canceled", fmt.Errorf("call: %w", context.Canceled), handlers.CauseCanceled},
		{"database", fmt.Errorf("insert: %w", &pgconn.PgError{Code: "40001"}), handlers.CauseDatabase},
		{"retry after", handlers.RetryAfter(plain, 1), handlers.CauseRetryAfter},
		{"not ready", handlers.NotReady(plain), handlers.CauseNotReady},
		{"permanent", handlers.Permanent(plain), handlers.CausePermanent},
		{"explicit wins", handlers.Permanent(handlers.WithCause(fmt.Errorf("x: %w", ledger.ErrUnknownCurrency), handlers.CauseInvalidPayload)), handlers.CauseInvalidPayload},
		{"outermost explicit wins", handlers.WithCause(handlers.WithCause(plain, handlers.CauseTimeout), handlers.CauseForward5xx), handlers.CauseForward5xx},
	} {
		if got := handlers.CauseOf(tt.err); got != tt.want {
			t.Errorf("%s: CauseOf(%v) = %q, want %q", tt.name, tt.err, got, tt.want)
		}
	}
	for _, c := range handlers.Causes {
		if !handlers.KnownCause(c) {
			t.Errorf("%q is not known", c)
		}
	}
	if handlers.KnownCause("exhausted") {
		t.Error(`"exhausted" is known`)
	}
}

// WithCause changes neither the message nor the classification.
func TestWithCauseKeepsMessageAndClass(t *testing.T) {
	t.Parallel()
	err := handlers.WithCause(handlers.Permanent(errors.New("no")), handlers.CauseForward4xx)
	var perm *handlers.PermanentError
	if !errors.As(err, &perm) || err.Error() != "no" {
		t.Fatalf("%v: want a *PermanentError saying no", err)
	}
	if handlers.WithCause(nil, handlers.CauseTimeout) != nil {
		t.Error("WithCause(nil) is not nil")
	}
}
