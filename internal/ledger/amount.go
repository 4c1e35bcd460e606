package ledger

import (
	"math"
	"strconv"
	"strings"
)

// ParseDecimal converts a non-negative decimal string in major units ("10.00",
// "10", "0.5", "1234.567" for KWD) to an integer amount in the currency's minor
// units, with exact integer arithmetic.
//
// It accepts digits with at most one '.' that has digits on both sides. It
// refuses a sign, spaces, exponent notation, an empty string, a result above
// math.MaxInt64, and more fraction digits than the currency's exponent unless
// the extra digits are zeros ("1000.00" JPY is 1000; "10.50" JPY is refused,
// as rounding money is not this function's call). Zero is accepted: callers
// that need a positive amount check for it.
//
// Errors are ErrUnknownCurrency (wrapped) or *AmountError.
func ParseDecimal(amount string, currency string) (int64, error) {
	exp, err := checkCurrency(currency)
	if err != nil {
		return 0, err
	}
	bad := func(reason string) (int64, error) {
		return 0, &AmountError{Amount: amount, Currency: currency, Reason: reason}
	}
	if amount == "" {
		return bad("empty")
	}
	if amount[0] == '-' {
		return bad("negative")
	}
	whole, frac, hasPoint := strings.Cut(amount, ".")
	if whole == "" || (hasPoint && frac == "") {
		return bad("want digits on both sides of the decimal point")
	}
	if !allDigits(whole) || !allDigits(frac) {
		return bad("want a plain decimal number like 10.00")
	}
	if len(frac) > exp {
		if strings.Trim(frac[exp:], "0") != "" {
			return bad("more than " + digitsWord(exp) + " for this currency")
		}
		frac = frac[:exp]
	}
	// Scale: whole digits, then the fraction padded to exactly exp digits.
	var n int64
	for _, part := range []string{whole, frac + strings.Repeat("0", exp-len(frac))} {
		for i := 0; i < len(part); i++ {
			d := int64(part[i] - '0')
			if n > (math.MaxInt64-d)/10 {
				return bad("too large")
			}
			n = n*10 + d
		}
	}
	return n, nil
}

func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

func digitsWord(n int) string {
	switch n {
	case 0:
		return "no fraction digits"
	case 1:
		return "1 fraction digit"
	default:
		return strconv.Itoa(n) + " fraction digits"
	}
}
