package backfill_test

import (
	"context"
	"encoding/base64"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/inboxhq/inbox/internal/backfill"
)

const redirectKey = "sk_test_51RedirectProbeKey0123456789abcdef"

// A redirect is never followed, not even to another port of the same host
// (issue 22: that port received the API key, and its answer was taken for
// Stripe's events): the run fails with the status and where it was sent.
func TestTheBackfillClientFollowsNoRedirect(t *testing.T) {
	t.Parallel()
	var hits atomic.Int64
	var gotAuth atomic.Value
	elsewhere := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		gotAuth.Store(r.Header.Get("Authorization"))
		fmt.Fprint(w, `{"object":"list","data":[],"has_more":false}`)
	}))
	t.Cleanup(elsewhere.Close)
	redirecting := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, elsewhere.URL+r.URL.RequestURI(), http.StatusFound)
	}))
	t.Cleanup(redirecting.Close)

	c := backfill.NewStripeClient(redirecting.URL, redirectKey, "", backfill.ClientOptions{})
	_, err := c.ListEvents(context.Background(), "", time.Now().Add(-time.Hour), time.Now(), "")
	require.Error(t, err)
	require.ErrorContains(t, err, "302 Found")
	require.ErrorContains(t, err, "redirected to "+elsewhere.URL+", not followed")
	require.Zero(t, hits.Load(), "the other port never got a request (nor the key): %v", gotAuth.Load())
	require.NotContains(t, err.Error(), redirectKey)
}

// A key the API echoes back is cut out of the error however it is written:
// upper-cased, URL-escaped, base64 (alone or as a basic-auth user).
func TestTheBackfillClientRedactsTheKeyInAnyForm(t *testing.T) {
	t.Parallel()
	echoes := []string{
		strings.ToUpper(redirectKey),
		"Bearer-less " + redirectKey,
		base64.StdEncoding.EncodeToString([]byte(redirectKey + ":")),
		base64.RawURLEncoding.EncodeToString([]byte(redirectKey)),
	}
	for _, echo := range echoes {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusBadRequest)
			fmt.Fprintf(w, `{"error":{"type":"invalid_request_error","message":"bad key %s here"}}`, echo)
		}))
		c := backfill.NewStripeClient(srv.URL, redirectKey, "", backfill.ClientOptions{})
		_, err := c.ListEvents(context.Background(), "", time.Now().Add(-time.Hour), time.Now(), "")
		srv.Close()
		require.Error(t, err)
		require.NotContains(t, strings.ToLower(err.Error()), strings.ToLower(echo), "echoed as %q", echo)
		require.Contains(t, err.Error(), "[redacted]")
	}
}
