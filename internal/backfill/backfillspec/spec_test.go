package backfillspec

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/inboxhq/inbox/internal/provider"
)

// The rules on their own, without a sources file (config's tests load them
// through one): which providers, which keys, which pairs of Stripe sources.
func TestRules(t *testing.T) {
	t.Parallel()
	for prov, want := range map[string]bool{provider.Stripe: true, provider.GitHub: true, provider.Shopify: false, provider.Standard: false, provider.HMAC: false} {
		require.Equal(t, want, Supported(prov), prov)
	}
	for key, want := range map[string][2]bool{"sk_live_x": {true, true}, "rk_test_x": {false, true}, "pk_live_x": {false, false}, "": {false, false}} {
		live, ok := StripeKeyLive(key)
		require.Equal(t, want, [2]bool{live, ok}, key)
	}

	spec := func(events ...string) *Spec { return &Spec{APIKey: "sk_test_x", Events: events} }
	require.NoError(t, CheckStripeSources([]StripeSource{
		{Name: "a", AccountID: "acct_1", Spec: spec()},
		{Name: "b", AccountID: "acct_2", Spec: spec()},
		{Name: "c", Spec: spec("charge.*")},
		{Name: "d", Spec: spec("invoice.paid", "customer.created")},
	}), "other accounts, or disjoint events")
	for _, pair := range [][2]*Spec{
		{spec(), spec("charge.refunded")},                         // one lists every event
		{spec("charge.*"), spec("charge.refunded")},               // a pattern covers a type
		{spec("charge.*"), spec("charge.dispute.*")},              // two patterns overlap
		{spec("charge.refunded"), spec("charge.refunded", "x.y")}, // a shared type
	} {
		err := CheckStripeSources([]StripeSource{{Name: "a", Spec: pair[0]}, {Name: "b", Spec: pair[1]}})
		require.ErrorContains(t, err, `sources "a" and "b": both backfill Stripe with no account_id`)
		require.NotContains(t, err.Error(), "sk_test_x")
	}
}
