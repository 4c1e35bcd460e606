package handlers

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/inboxhq/inbox/internal/envelope"
)

// decodePayload decodes the envelope's JSON document (Envelope.Document) into v. Its errors, like those of the other payload helpers,
// are plain; callers mark them permanent, as the same bytes will not decode
// better on a retry.
func decodePayload(env *envelope.Envelope, v any) error {
	raw := env.Document()
	if len(bytes.TrimSpace(raw)) == 0 {
		return errors.New("envelope has no payload")
	}
	if err := json.Unmarshal(raw, v); err != nil {
		return fmt.Errorf("decode payload: %w", err)
	}
	return nil
}

// missing is the error for a required field that is absent.
func missing(field string) error {
	return fmt.Errorf("payload has no %s", field)
}

// jsonInt reads a required integer that must be a JSON number (not a string,
// not a fraction, not exponent notation).
func jsonInt(raw json.RawMessage, field string) (int64, error) {
	s := string(bytes.TrimSpace(raw))
	if s == "" || s == "null" {
		return 0, missing(field)
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%s is %s, want an integer", field, short(s))
	}
	return n, nil
}

// jsonID reads a required id that is a non-negative integer JSON number and
// returns its digits exactly (Shopify ids exceed float64's exact range).
func jsonID(raw json.RawMessage, field string) (string, error) {
	s := string(bytes.TrimSpace(raw))
	if s == "" || s == "null" {
		return "", missing(field)
	}
	if _, err := strconv.ParseUint(s, 10, 64); err != nil {
		return "", fmt.Errorf("%s is %s, want an integer id", field, short(s))
	}
	return s, nil
}

// currencyCode uppercases an ASCII currency code ("usd" -> "USD"). Anything
// else is returned unchanged for the ledger to refuse.
func currencyCode(s string) string {
	b := []byte(s)
	for i, c := range b {
		switch {
		case 'a' <= c && c <= 'z':
			b[i] = c - 'a' + 'A'
		case 'A' <= c && c <= 'Z':
		default:
			return s
		}
	}
	return string(b)
}

// header returns the envelope header name, matched case-insensitively.
func header(env *envelope.Envelope, name string) string {
	if v, ok := env.Headers[name]; ok {
		return v
	}
	for k, v := range env.Headers {
		if strings.EqualFold(k, name) {
			return v
		}
	}
	return ""
}

// short trims a payload excerpt for an error message.
func short(s string) string {
	const max = 40
	if len(s) > max {
		return s[:max] + "..."
	}
	return s
}
