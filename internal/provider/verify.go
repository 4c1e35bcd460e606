package provider

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// Redacted is the value Delivery.Headers holds for a signature header: its
// presence is kept for audit, its value never is.
const Redacted = "[redacted]"

// Limits on the identifiers of a verified delivery. They match the envelope
// table's constraints, measured here in bytes (so they also hold in
// characters).
const (
	MaxDeliveryIDLen = 512
	MaxEventTypeLen  = 256
)

// macSize is the size of an HMAC-SHA256, the only MAC any provider uses.
const macSize = sha256.Size

// Headers every provider's Delivery keeps when present.
var commonHeaders = []string{"Content-Type", "User-Agent"}

// rawKeys returns each configured secret as an HMAC key, byte for byte (the
// Stripe, GitHub and Shopify convention). A secret with leading or trailing
// white space is refused: it is nearly always a stray newline from a secrets
// file, and would otherwise make every delivery fail verification.
func rawKeys(secrets []string) ([][]byte, error) {
	if len(secrets) == 0 {
		return nil, errors.New("no secret configured")
	}
	keys := make([][]byte, len(secrets))
	for i, s := range secrets {
		if err := checkSecret(i, s); err != nil {
			return nil, err
		}
		keys[i] = []byte(s)
	}
	return keys, nil
}

// checkSecret reports a secret that cannot be right, naming it by its
// 1-based position and never by its value.
func checkSecret(i int, s string) error {
	if s == "" {
		return fmt.Errorf("secret %d is empty", i+1)
	}
	if strings.TrimSpace(s) != s {
		return fmt.Errorf("secret %d has leading or trailing white space", i+1)
	}
	return nil
}

// checkTolerance refuses a negative tolerance, which would reject every
// delivery.
func checkTolerance(d time.Duration) error {
	if d < 0 {
		return errors.New("tolerance is negative")
	}
	return nil
}

// hmacSHA256 returns HMAC-SHA256(key, parts concatenated).
func hmacSHA256(key []byte, parts ...[]byte) []byte {
	m := hmac.New(sha256.New, key)
	for _, p := range parts {
		m.Write(p)
	}
	return m.Sum(nil)
}

// matchAny reports whether any of sigs equals the MAC of parts under any of
// keys. Comparisons use hmac.Equal.
func matchAny(keys, sigs [][]byte, parts ...[]byte) bool {
	for _, k := range keys {
		want := hmacSHA256(k, parts...)
		for _, s := range sigs {
			if hmac.Equal(want, s) {
				return true
			}
		}
	}
	return false
}

// parseUnix parses a signed Unix timestamp in seconds: ASCII digits only (no
// sign, no spaces), at most 18 of them so it cannot overflow.
func parseUnix(s string) (time.Time, bool) {
	if s == "" || len(s) > 18 {
		return time.Time{}, false
	}
	var n int64
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return time.Time{}, false
		}
		n = n*10 + int64(c-'0')
	}
	return time.Unix(n, 0).UTC(), true
}

// checkTimestamp accepts signed when |now - signed| <= tolerance: exactly at
// the boundary is accepted.
func checkTimestamp(signed, now time.Time, tolerance time.Duration) error {
	switch {
	case now.Sub(signed) > tolerance:
		return sigErr("timestamp outside tolerance (too old)")
	case signed.Sub(now) > tolerance:
		return sigErr("timestamp outside tolerance (in the future)")
	}
	return nil
}

func sigErr(reason string) error { return &SignatureError{Reason: reason} }

func formatErr(reason string) error { return &FormatError{Reason: reason} }

// isJSON reports whether body is one valid JSON value in UTF-8 (what every
// supported provider sends, and what a PostgreSQL jsonb column accepts).
func isJSON(body []byte) bool {
	return utf8.Valid(body) && json.Valid(body)
}

// jsonObject returns body's top-level members, or nil when body is valid
// JSON but not an object. Member names are matched exactly (case-sensitive),
// unlike encoding/json's struct field matching.
func jsonObject(body []byte) map[string]json.RawMessage {
	var obj map[string]json.RawMessage
	if json.Unmarshal(body, &obj) != nil {
		return nil
	}
	return obj
}

// stringMember returns obj[name] when it is a JSON string.
func stringMember(obj map[string]json.RawMessage, name string) (string, bool) {
	raw, ok := obj[name]
	if !ok {
		return "", false
	}
	var s string
	if json.Unmarshal(raw, &s) != nil {
		return "", false
	}
	return s, true
}

// checkDeliveryID checks a delivery id taken from where (for the message).
func checkDeliveryID(id, where string) error {
	switch {
	case id == "":
		return formatErr("missing delivery id (" + where + ")")
	case len(id) > MaxDeliveryIDLen:
		return formatErr(fmt.Sprintf("delivery id (%s) is longer than %d bytes", where, MaxDeliveryIDLen))
	case !printable(id):
		return formatErr("delivery id (" + where + ") is not printable UTF-8")
	}
	return nil
}

// usableEventType returns typ when it can be stored and routed on, and ""
// when it is longer than MaxEventTypeLen or not printable UTF-8. An event
// type is never a reason to refuse a verified delivery: one with an empty
// type is stored, and the worker marks it ignored unless a handler matches.
func usableEventType(typ string) string {
	if len(typ) > MaxEventTypeLen || !printable(typ) {
		return ""
	}
	return typ
}

// printable reports whether s is valid UTF-8 without control characters (a
// NUL, for one, cannot be stored in a PostgreSQL text column).
func printable(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if unicode.IsControl(r) {
			return false
		}
	}
	return true
}

// auditHeaders returns the headers of h worth keeping, keyed by their
// canonical names: the first value of each header in keep that is present
// and non-empty, and Redacted for each header in signatures that is present.
func auditHeaders(h http.Header, keep, signatures []string) map[string]string {
	m := make(map[string]string, len(commonHeaders)+len(keep)+len(signatures))
	for _, names := range [][]string{commonHeaders, keep} {
		for _, k := range names {
			if v := h.Get(k); v != "" {
				m[http.CanonicalHeaderKey(k)] = v
			}
		}
	}
	for _, k := range signatures {
		if len(h.Values(k)) > 0 {
			m[http.CanonicalHeaderKey(k)] = Redacted
		}
	}
	return m
}

// jsonPayload returns a copy of body when it is JSON (so the Delivery does
// not alias the caller's buffer), and nil when it is not.
func jsonPayload(body []byte) json.RawMessage {
	if !isJSON(body) {
		return nil
	}
	return json.RawMessage(append([]byte(nil), body...))
}
