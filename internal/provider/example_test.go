package provider_test

import (
	"fmt"
	"net/http"
	"time"

	"github.com/inboxhq/inbox/internal/provider"
)

func ExampleNew() {
	// One verifier per configured source; two secrets while one is rotated.
	v, err := provider.New(provider.Config{
		Provider: provider.Stripe,
		Secrets:  []string{"whsec_new_secret", "whsec_old_secret"},
	})
	if err != nil {
		panic(err)
	}

	// What Stripe would send, signed with the old secret at signedAt.
	body := []byte(`{"id":"evt_1","object":"event","type":"payment_intent.succeeded"}`)
	signedAt := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	h := http.Header{}
	if err := provider.Sign(provider.Stripe, "whsec_old_secret", h, body, signedAt); err != nil {
		panic(err)
	}

	d, err := v.Verify(h, body, signedAt.Add(30*time.Second))
	fmt.Println(d.DeliveryID, d.EventType, d.SignedAt, d.Headers["Stripe-Signature"], err)

	// The same request ten minutes later, and with a changed body.
	_, err = v.Verify(h, body, signedAt.Add(10*time.Minute))
	fmt.Println(err)
	_, err = v.Verify(h, []byte(`{"id":"evt_1","object":"event","type":"charge.refunded"}`), signedAt)
	fmt.Println(err)

	// Output:
	// evt_1 payment_intent.succeeded 2025-06-01 12:00:00 +0000 UTC [redacted] <nil>
	// signature rejected: timestamp outside tolerance (too old)
	// signature rejected: no signature matches
}
