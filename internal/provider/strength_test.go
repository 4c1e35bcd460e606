package provider

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestCheckKeyStrength(t *testing.T) {
	t.Parallel()
	cases := []struct {
		provider, secret, err string
	}{
		{Stripe, "x", "has a 1-byte key: at least 16"},
		{Stripe, "whsec_", "has no key after its whsec_ prefix"},
		{Stripe, "whsec_short", "has a 5-byte key"},
		{Stripe, "whsec_test_secret", "has a 11-byte key"},
		{Stripe, "whsec_" + strings.Repeat("k", 32), "has 1 distinct characters: at least 8"},
		{Stripe, "whsec_" + strings.Repeat("abc", 11), "has 3 distinct characters"},
		{Stripe, "whsec_dev_stripe_secret_do_not_use", ""},
		{Standard, "whsec_AA==", "has a 1-byte key"},
		{Standard, "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", ""},
		{Standard, "not base64!", ""}, // New refuses it
		{GitHub, "It's a Secret to Everybody", ""},
		{GitHub, "hush", "has a 4-byte key"},
		{Shopify, strings.Repeat("s", 16), "has 1 distinct characters"},
		{HMAC, "0123456789abcdef", ""},
	}
	for _, tc := range cases {
		err := CheckKeyStrength(tc.provider, tc.secret)
		if tc.err == "" {
			require.NoError(t, err, "%s %q", tc.provider, tc.secret)
			continue
		}
		require.ErrorContains(t, err, tc.err, "%s %q", tc.provider, tc.secret)
		if len(tc.secret) > 6 {
			require.NotContains(t, err.Error(), tc.secret[6:], "never quotes the secret")
		}
	}
}
