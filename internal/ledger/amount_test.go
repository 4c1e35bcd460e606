package ledger

import (
	"errors"
	"testing"
)

func TestParseDecimal(t *testing.T) {
	t.Parallel()
	tests := []struct {
		amount, currency string
		want             int64
		wantErr          error // nil: success
	}{
		{"10.00", "USD", 1000, nil},
		{"10", "USD", 1000, nil},
		{"0.5", "USD", 50, nil},
		{"0.05", "USD", 5, nil},
		{"0", "USD", 0, nil},
		{"0.00", "EUR", 0, nil},
		{"007.10", "EUR", 710, nil},
		{"19.990", "USD", 1999, nil},           // extra zero digits are fine
		{"19.991", "USD", 0, ErrInvalidAmount}, // extra non-zero digit is not
		{"1000", "JPY", 1000, nil},
		{"1000.00", "JPY", 1000, nil},
		{"10.50", "JPY", 0, ErrInvalidAmount},
		{"1500", "KRW", 1500, nil},
		{"1234.567", "KWD", 1234567, nil},
		{"1234.5", "KWD", 1234500, nil},
		{"1234.5678", "KWD", 0, ErrInvalidAmount},
		{"1.2345", "CLF", 12345, nil},
		{"92233720368547758.07", "USD", 9223372036854775807, nil},
		{"92233720368547758.08", "USD", 0, ErrInvalidAmount},
		{"9223372036854775807", "JPY", 9223372036854775807, nil},
		{"9223372036854775808", "JPY", 0, ErrInvalidAmount},
		{"99999999999999999999999", "USD", 0, ErrInvalidAmount},
		{"", "USD", 0, ErrInvalidAmount},
		{"-1.00", "USD", 0, ErrInvalidAmount},
		{"+1.00", "USD", 0, ErrInvalidAmount},
		{"1e3", "USD", 0, ErrInvalidAmount},
		{"1.5E2", "USD", 0, ErrInvalidAmount},
		{" 1.00", "USD", 0, ErrInvalidAmount},
		{"1,00", "EUR", 0, ErrInvalidAmount},
		{"1.", "USD", 0, ErrInvalidAmount},
		{".5", "USD", 0, ErrInvalidAmount},
		{"1.2.3", "USD", 0, ErrInvalidAmount},
		{"NaN", "USD", 0, ErrInvalidAmount},
		{"١٠", "USD", 0, ErrInvalidAmount}, // non-ASCII digits
		{"10.00", "usd", 0, ErrUnknownCurrency},
		{"10.00", "XXX", 0, ErrUnknownCurrency},
		{"10.00", "", 0, ErrUnknownCurrency},
	}
	for _, tt := range tests {
		got, err := ParseDecimal(tt.amount, tt.currency)
		if tt.wantErr == nil {
			if err != nil || got != tt.want {
				t.Errorf("ParseDecimal(%q, %q) = %d, %v; want %d, nil", tt.amount, tt.currency, got, err, tt.want)
			}
			continue
		}
		if !errors.Is(err, tt.wantErr) {
			t.Errorf("ParseDecimal(%q, %q) = %d, %v; want error %v", tt.amount, tt.currency, got, err, tt.wantErr)
		}
		if errors.Is(tt.wantErr, ErrInvalidAmount) {
			var ae *AmountError
			if !errors.As(err, &ae) || ae.Amount != tt.amount || ae.Currency != tt.currency {
				t.Errorf("ParseDecimal(%q, %q) error %#v, want an *AmountError naming the input", tt.amount, tt.currency, err)
			}
		}
	}
}

func TestExponent(t *testing.T) {
	t.Parallel()
	for code, want := range map[string]int{
		"USD": 2, "EUR": 2, "GBP": 2, "CHF": 2, "MGA": 2, "HUF": 2,
		"JPY": 0, "KRW": 0, "VND": 0, "CLP": 0, "ISK": 0, "UGX": 0, "XAF": 0, "XOF": 0, "XPF": 0,
		"PYG": 0, "RWF": 0, "KMF": 0, "GNF": 0, "BIF": 0, "DJF": 0, "VUV": 0,
		"BHD": 3, "IQD": 3, "JOD": 3, "KWD": 3, "LYD": 3, "OMR": 3, "TND": 3,
		"CLF": 4, "UYW": 4,
	} {
		if got, ok := Exponent(code); !ok || got != want {
			t.Errorf("Exponent(%q) = %d, %v; want %d, true", code, got, ok, want)
		}
	}
	for _, code := range []string{"", "usd", "XXX", "XTS", "BTC", "US", "USDT"} {
		if got, ok := Exponent(code); ok {
			t.Errorf("Exponent(%q) = %d, true; want unknown", code, got)
		}
	}
	if n := len(exponents); n < 150 {
		t.Errorf("only %d currencies known; want the ISO 4217 list", n)
	}
	for code, e := range exponents {
		if len(code) != 3 || code[0] < 'A' || code[0] > 'Z' || code[1] < 'A' || code[1] > 'Z' || code[2] < 'A' || code[2] > 'Z' {
			t.Errorf("code %q is not three uppercase letters", code)
		}
		if e < 0 || e > 4 {
			t.Errorf("code %q has exponent %d", code, e)
		}
	}
}
