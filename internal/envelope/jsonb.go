package envelope

import (
	"encoding/json"
	"unicode/utf8"
)

// Limits of PostgreSQL's jsonb (checked against PostgreSQL 15) that valid
// JSON can exceed. A delivery beyond any of them is stored with its raw body
// and a NULL payload column: handlers read the body, so it is processed like
// any other.
const (
	// jsonbMaxScale is numeric's largest display scale (NUMERIC_DSCALE_MAX):
	// digits after the decimal point once the exponent is applied.
	jsonbMaxScale = 16383
	// jsonbMaxWeight is the largest decimal exponent of a numeric's leading
	// digit (NUMERIC_WEIGHT_MAX base-10000 digits, plus three): 1e131071
	// fits, 1e131072 does not.
	jsonbMaxWeight = 131071
	// jsonbMaxExponent bounds a written exponent. PostgreSQL 15 accepts
	// larger ones within the two limits above; servers before it refused
	// any beyond ±1000. Refusing them here only drops the parsed copy.
	jsonbMaxExponent = 1000
	// jsonbMaxDepth bounds nesting. PostgreSQL's parser recurses and
	// refuses input past max_stack_depth; no webhook nests this deep.
	jsonbMaxDepth = 1000
)

// jsonbPayload returns p for the payload column, or nil when the column must
// stay NULL: p is empty, or jsonb cannot hold it. Never an error: the raw
// body is the record, the payload column an optional parsed copy.
func jsonbPayload(p json.RawMessage) []byte {
	if len(p) == 0 || !JSONBSafe(p) {
		return nil
	}
	return p
}

// JSONBSafe reports whether PostgreSQL's jsonb accepts b: b is one valid
// JSON value in UTF-8 with no \u0000 escape, no unpaired surrogate escape
// (what JavaScript's JSON.stringify and Python's json.dumps write for a
// string cut inside an emoji), no number outside numeric's range, and no
// nesting deeper than 1,000. It errs on the side of false: a false only
// leaves the parsed copy out.
func JSONBSafe(b []byte) bool {
	if !utf8.Valid(b) || !json.Valid(b) {
		return false
	}
	depth := 0
	for i := 0; i < len(b); {
		switch c := b[i]; {
		case c == '"':
			end, ok := scanString(b, i+1)
			if !ok {
				return false
			}
			i = end
		case c == '-' || ('0' <= c && c <= '9'):
			end, ok := scanNumber(b, i)
			if !ok {
				return false
			}
			i = end
		case c == '[' || c == '{':
			depth++
			if depth > jsonbMaxDepth {
				return false
			}
			i++
		case c == ']' || c == '}':
			depth--
			i++
		default:
			i++ // white space, ',', ':', true, false, null
		}
	}
	return true
}

// scanString scans a string whose opening quote is before b[i] and returns
// the index after its closing quote, and false for an escape jsonb refuses.
// b is valid JSON.
func scanString(b []byte, i int) (int, bool) {
	for i < len(b) {
		switch b[i] {
		case '"':
			return i + 1, true
		case '\\':
			if i+1 < len(b) && b[i+1] == 'u' {
				r, ok := hex4(b, i+2)
				if !ok || r == 0 {
					return 0, false
				}
				i += 6
				switch {
				case 0xDC00 <= r && r <= 0xDFFF:
					return 0, false // a low surrogate with no high one before it
				case 0xD800 <= r && r <= 0xDBFF:
					if i+1 >= len(b) || b[i] != '\\' || b[i+1] != 'u' {
						return 0, false
					}
					lo, ok := hex4(b, i+2)
					if !ok || lo < 0xDC00 || lo > 0xDFFF {
						return 0, false
					}
					i += 6
				}
				continue
			}
			i += 2
		default:
			i++
		}
	}
	return 0, false
}

// hex4 decodes the four hex digits at b[i:i+4].
func hex4(b []byte, i int) (rune, bool) {
	if i+4 > len(b) {
		return 0, false
	}
	var r rune
	for _, c := range b[i : i+4] {
		r <<= 4
		switch {
		case '0' <= c && c <= '9':
			r |= rune(c - '0')
		case 'a' <= c && c <= 'f':
			r |= rune(c - 'a' + 10)
		case 'A' <= c && c <= 'F':
			r |= rune(c - 'A' + 10)
		default:
			return 0, false
		}
	}
	return r, true
}

// scanNumber scans the JSON number at b[i] and returns the index after it,
// and false when numeric cannot hold it. It computes what PostgreSQL's
// numeric input does: the scale (digits after the point, less the
// exponent) and the decimal weight of the leading non-zero digit.
func scanNumber(b []byte, i int) (int, bool) {
	if b[i] == '-' {
		i++
	}
	intDigits, fracDigits := 0, 0
	firstNonZero := -1 // index among all mantissa digits
	for ; i < len(b) && '0' <= b[i] && b[i] <= '9'; i++ {
		if firstNonZero < 0 && b[i] != '0' {
			firstNonZero = intDigits
		}
		intDigits++
	}
	if i < len(b) && b[i] == '.' {
		for i++; i < len(b) && '0' <= b[i] && b[i] <= '9'; i++ {
			if firstNonZero < 0 && b[i] != '0' {
				firstNonZero = intDigits + fracDigits
			}
			fracDigits++
		}
	}
	exp := 0
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		neg := false
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			neg = b[i] == '-'
			i++
		}
		for ; i < len(b) && '0' <= b[i] && b[i] <= '9'; i++ {
			if exp <= jsonbMaxExponent { // saturate: past the limit is refused anyway
				exp = exp*10 + int(b[i]-'0')
			}
		}
		if neg {
			exp = -exp
		}
	}
	if exp > jsonbMaxExponent || exp < -jsonbMaxExponent {
		return 0, false
	}
	if fracDigits-exp > jsonbMaxScale {
		return 0, false // also for zero: 0e-20000 overflows
	}
	if firstNonZero >= 0 && intDigits-1-firstNonZero+exp > jsonbMaxWeight {
		return 0, false
	}
	return i, true
}
