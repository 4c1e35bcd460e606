package provider

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Every registered provider is complete: a sender's delivery made with
// Address and Sign verifies with New, and names the delivery it was given.
// A provider added to schemes without one of these fails here.
func TestEverySchemeRoundTrips(t *testing.T) {
	t.Parallel()
	require.Equal(t, []string{Stripe, GitHub, Shopify, Standard}, Names)
	secrets := map[string]string{Stripe: stripeSecret, Standard: standardSecret, GitHub: githubSecret, Shopify: shopifySecret}
	body := []byte(`{"id":"evt_rt","type":"payment.succeeded"}`)
	for _, name := range Names {
		v, err := New(Config{Provider: name, Secrets: []string{secrets[name]}})
		require.NoError(t, err, name)
		h := http.Header{"Content-Type": {"application/json"}}
		Address(name, h, "evt_rt", "payment.succeeded")
		now := time.Now()
		require.NoError(t, Sign(name, secrets[name], h, body, now), name)
		d, err := v.Verify(h, body, now)
		require.NoError(t, err, name)
		require.Equal(t, "evt_rt", d.DeliveryID, name)
		require.Equal(t, "payment.succeeded", d.EventType, name)
	}
	// A per-source scheme is known to New but is nobody's fixed scheme.
	_, ok := lookup(HMAC)
	require.True(t, ok)
	require.NotContains(t, Names, HMAC)
	require.ErrorIs(t, Sign(HMAC, "s3cr3t-value", http.Header{}, body, time.Now()), ErrUnknownProvider)
	h := http.Header{}
	Address("paypal", h, "x", "y")
	Address(HMAC, h, "x", "y")
	require.Empty(t, h, "nothing for a name without a fixed scheme")
}

// The windows each provider's documented schedule gives (RetryWindow) and
// the longer one a redelivery by hand gives (RedeliveryWindow).
func TestProviderWindows(t *testing.T) {
	t.Parallel()
	for name, want := range map[string][2]time.Duration{
		Stripe:    {72 * time.Hour, 72 * time.Hour},
		GitHub:    {0, 72 * time.Hour},
		Shopify:   {4 * time.Hour, 4 * time.Hour},
		Standard:  {27*time.Hour + 35*time.Minute + 5*time.Second, 27*time.Hour + 35*time.Minute + 5*time.Second},
		HMAC:      {0, 0},
		"unknown": {0, 0},
	} {
		require.Equal(t, want, [2]time.Duration{RetryWindow(name), RedeliveryWindow(name)}, name)
	}
}
