package handlers_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/inboxhq/inbox/internal/handlers"
	"github.com/inboxhq/inbox/internal/labels"
	"github.com/inboxhq/inbox/internal/ledger"
)

func TestCauseOf(t *testing.T) {
	t.Parallel()
	plain := errors.New("boom")
	for _, tt := range []struct {
		name string
		err  error
		want labels.Cause
	}{
		{"nil", nil, ""},
		{"plain", plain, labels.CauseInternal},
		{"unknown currency, permanent", handlers.Permanent(fmt.Errorf("post: %w %q", ledger.ErrUnknownCurrency, "XYZ")), labels.CauseUnknownCurrency},
		{"invalid amount", handlers.Permanent(&ledger.AmountError{}), labels.CauseInvalidAmount},
		{"posting rejected", handlers.Permanent(&ledger.PostingError{Reason: "over-refund"}), labels.CausePostingRejected},
		{"payment not posted", handlers.NotReady(fmt.Errorf("refund: %w", ledger.ErrPaymentNotPosted)), labels.CausePaymentNotPosted},
		{"refund not posted", handlers.NotReady(ledger.ErrRefundNotPosted), labels.CauseRefundNotPosted},
		{"deadline", fmt.Errorf("call: %w", context.DeadlineExceeded), labels.CauseTimeout},
		{"canceled", fmt.Errorf("call: %w", context.Canceled), labels.CauseCanceled},
		{"database", fmt.Errorf("insert: %w", &pgconn.PgError{Code: "40001"}), labels.CauseDatabase},
		{"retry after", handlers.RetryAfter(plain, 1), labels.CauseRetryAfter},
		{"not ready", handlers.NotReady(plain), labels.CauseNotReady},
		{"permanent", handlers.Permanent(plain), labels.CausePermanent},
		{"explicit wins", handlers.Permanent(handlers.WithCause(fmt.Errorf("x: %w", ledger.ErrUnknownCurrency), labels.CauseInvalidPayload)), labels.CauseInvalidPayload},
		{"outermost explicit wins", handlers.WithCause(handlers.WithCause(plain, labels.CauseTimeout), labels.CauseForward5xx), labels.CauseForward5xx},
	} {
		assert.Equal(t, tt.want, handlers.CauseOf(tt.err), "%s: CauseOf(%v)", tt.name, tt.err)
	}
	for _, c := range labels.Causes {
		assert.True(t, labels.KnownCause(c), "%q is not known", c)
	}
	assert.False(t, labels.KnownCause("exhausted"), `"exhausted" is known`)
}

// WithCause changes neither the message nor the classification.
func TestWithCauseKeepsMessageAndClass(t *testing.T) {
	t.Parallel()
	err := handlers.WithCause(handlers.Permanent(errors.New("no")), labels.CauseForward4xx)
	var perm *handlers.PermanentError
	require.ErrorAs(t, err, &perm)
	require.EqualError(t, err, "no")
	assert.NoError(t, handlers.WithCause(nil, labels.CauseTimeout), "WithCause(nil) is not nil")
}
