package provider

import "testing"

func TestCheckEventPattern(t *testing.T) {
	t.Parallel()
	for p, ok := range map[string]bool{
		"payment.succeeded": true, "payment.*": true, "*": true, "orders/paid": true,
		"": false, "**": false, "*.succeeded": false, "pay*ment": false,
	} {
		if err := CheckEventPattern(p); (err == nil) != ok {
			t.Errorf("CheckEventPattern(%q) = %v, want ok %v", p, err, ok)
		}
	}
}

func TestMatchEvent(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		pattern, event string
		want           bool
	}{
		{"payment.succeeded", "payment.succeeded", true},
		{"payment.succeeded", "payment.succeeded.v2", false},
		{"payment.*", "payment.succeeded", true},
		{"payment.*", "payment", false},
		{"payment.*", "payments.x", false},
		{"release*", "release.published", true},
		{"*", "anything", true},
		{"*", "", true},
		{"", "", true},
	} {
		if got := MatchEvent(tc.pattern, tc.event); got != tc.want {
			t.Errorf("MatchEvent(%q, %q) = %v, want %v", tc.pattern, tc.event, got, tc.want)
		}
	}
}
