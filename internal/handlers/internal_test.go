package handlers

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/inboxhq/inbox/internal/ledger"
)

func TestStripeToMinor(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		amount   int64
		currency string
		want     int64
		err      error
	}{
		{1000, "USD", 1000, nil}, // cents both ways
		{5000, "JPY", 5000, nil}, // zero-decimal both ways
		{1230, "KWD", 1230, nil}, // three-decimal both ways
		{50000, "ISK", 500, nil}, // two-decimal at Stripe, zero in ISO 4217
		{50050, "ISK", 0, ledger.ErrInvalidAmount},
		{1000, "MGA", 100000, nil}, // zero-decimal at Stripe, two in ISO 4217
		{1000, "UGX", 1000, nil},
		{-1, "USD", 0, ledger.ErrInvalidAmount},
		{1 << 62, "MGA", 0, ledger.ErrInvalidAmount},
		{100, "XYZ", 0, ledger.ErrUnknownCurrency},
	} {
		got, err := stripeToMinor(tt.amount, tt.currency)
		if tt.err != nil {
			if !errors.Is(err, tt.err) {
				t.Errorf("stripeToMinor(%d, %s) = %d, %v; want %v", tt.amount, tt.currency, got, err, tt.err)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("stripeToMinor(%d, %s) = %d, %v; want %d", tt.amount, tt.currency, got, err, tt.want)
		}
	}
}

func TestCurrencyCode(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{"usd": "USD", "USD": "USD", "Jpy": "JPY", "uſd": "uſd", "us d": "us d", "": ""} {
		if got := currencyCode(in); got != want {
			t.Errorf("currencyCode(%q) = %q, want %q", in, got, want)
		}
	}
}

// A posting result is reported, typed, to the run's Effects, and is the
// result JSON's; a run without Effects reports nothing and returns the same.
func TestPostingResultReportedToEffects(t *testing.T) {
	t.Parallel()
	e := &Effects{}
	res, err := noop(WithEffects(context.Background(), e), ledger.KindRefund, "m", "USD", "nothing refunded")
	require.NoError(t, err)
	require.NotNil(t, e.Posting)
	require.Equal(t, PostingResult{Kind: "refund", Merchant: "m", Currency: "USD", Reason: "nothing refunded"}, *e.Posting)
	var decoded PostingResult
	require.NoError(t, json.Unmarshal(res, &decoded))
	require.Equal(t, *e.Posting, decoded)

	bare, err := noop(context.Background(), ledger.KindRefund, "m", "USD", "nothing refunded")
	require.NoError(t, err)
	require.JSONEq(t, string(res), string(bare))
}
