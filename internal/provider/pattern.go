package provider

import (
	"errors"
	"fmt"
	"strings"
)

// The one syntax of event patterns this project reads (handler routes,
// forwarding's events): an exact event type ("payment.succeeded"), or a
// prefix followed by a single trailing "*" ("payment.*" matches
// "payment.succeeded" but not "payment" nor "payments.x"; "*" alone matches
// every event type). A Stripe backfill's events list is the one exception:
// it is sent to Stripe's API as is, in Stripe's own syntax.

// CheckEventPattern checks one event pattern (see above).
func CheckEventPattern(p string) error {
	switch {
	case p == "":
		return errors.New("event pattern is empty")
	case strings.Contains(strings.TrimSuffix(p, "*"), "*"):
		return fmt.Errorf("event pattern %q: '*' is allowed only at the end", p)
	}
	return nil
}

// MatchEvent reports whether eventType matches pattern, a pattern
// CheckEventPattern accepts.
func MatchEvent(pattern, eventType string) bool {
	if prefix, ok := strings.CutSuffix(pattern, "*"); ok {
		return strings.HasPrefix(eventType, prefix)
	}
	return pattern == eventType
}
