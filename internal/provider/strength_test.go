package provider

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestWeakSecrets(t *testing.T) {
	t.Parallel()
	cases := []struct {
		provider string
		secrets  []string
		pos, len []int
	}{
		{Stripe, []string{"x"}, []int{1}, []int{1}},
		{Stripe, []string{"whsec_short"}, []int{1}, []int{5}},
		{Stripe, []string{"whsec_test_secret", "whsec_" + strings.Repeat("k", 32)}, []int{1}, []int{11}},
		{Standard, []string{"whsec_AA=="}, []int{1}, []int{1}},
		{Standard, []string{"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}, nil, nil},
		{Standard, []string{"not base64!"}, nil, nil},
		{GitHub, []string{"It's a Secret to Everybody"}, nil, nil},
		{GitHub, []string{"hush"}, []int{1}, []int{4}},
		{Shopify, []string{"hush", strings.Repeat("s", 16)}, []int{1}, []int{4}},
	}
	for _, tc := range cases {
		pos, n := WeakSecrets(tc.provider, tc.secrets)
		require.Equal(t, tc.pos, pos, "%s %q", tc.provider, tc.secrets)
		require.Equal(t, tc.len, n, "%s %q", tc.provider, tc.secrets)
	}
}
