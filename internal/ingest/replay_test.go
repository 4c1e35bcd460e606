package ingest_test

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/inboxhq/inbox/internal/config"
	"github.com/inboxhq/inbox/internal/ingest"
	"github.com/inboxhq/inbox/internal/pgtest"
	"github.com/inboxhq/inbox/internal/provider"
)

// A captured signed body resent under a new delivery id is not a new
// delivery (issue 22: GitHub, Shopify and header-id hmac sources sign the
// body, not the id, and each resend became a new envelope, forwarded
// again): 200 duplicate naming the original envelope, nothing stored, the
// replay recorded and logged. A body relabelled with another event type
// header is a different delivery to the inbox (the residual risk
// docs/security.md states); the provider's own retry stays a duplicate.
func TestACapturedBodyUnderANewIDIsNotProcessedTwice(t *testing.T) {
	t.Parallel()
	for _, prov := range []string{provider.GitHub, provider.Shopify} {
		t.Run(prov, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			source, d := sample(prov, "captured-1")
			first := b.send(t, source, d)
			require.Equal(t, http.StatusAccepted, first.code, first.raw)
			retry := b.send(t, source, d)
			require.Equal(t, http.StatusOK, retry.code)
			require.Equal(t, "duplicate", retry.Status)

			for _, id := range []string{"forged-1", "forged-2"} {
				d.DeliveryID = id
				r := b.send(t, source, d)
				require.Equal(t, http.StatusOK, r.code, r.raw)
				require.Equal(t, "duplicate", r.Status)
				require.Equal(t, first.EnvelopeID, r.EnvelopeID)
			}
			envelopes, jobs, _ := b.stored(t)
			require.Equal(t, [2]int{1, 1}, [2]int{envelopes, jobs}, "one envelope, one job")
			require.Equal(t, 2, pgtest.Count(t, b.pool, `SELECT count(*) FROM envelope_duplicate WHERE envelope_id = $1 AND replayed_as LIKE 'forged-%'`, first.EnvelopeID))
			require.Contains(t, b.logs.String(), `"msg":"signed body replayed under a new delivery id`)
			require.Contains(t, b.logs.String(), `"replay_of":"captured-1"`)

			// The same body under another event type header is another
			// delivery to the inbox.
			d.DeliveryID = "relabelled-1"
			d.EventType = map[string]string{provider.GitHub: "release", provider.Shopify: "orders/updated"}[prov]
			r := b.send(t, source, d)
			require.Equal(t, http.StatusAccepted, r.code, r.raw)
		})
	}
}

// An hmac source that takes the id from a header without signing it gets
// the same protection; one that signs {id} needs none (a new id is a new
// signature, which takes the secret).
func TestAnHMACSourceWithAnUnsignedHeaderIDRecognisesReplays(t *testing.T) {
	t.Parallel()
	const secret = "acme-signing-secret-0123456789"
	cfg, err := config.Parse([]byte(`
sources:
  acme:
    provider: hmac
    secrets: ["`+secret+`"]
    hmac:
      signature_header: X-Acme-Signature
      delivery_id: {header: X-Acme-Delivery}
      event_type: {header: X-Acme-Event}
`), func(string) string { return "" })
	require.NoError(t, err)
	b := serveConfig(t, pgtest.NewPool(t), cfg, ingest.Options{})
	body := []byte(`{"invoice":"inv_1","amount":100}`)
	m := hmac.New(sha256.New, []byte(secret))
	m.Write(body)
	sig := hex.EncodeToString(m.Sum(nil))
	send := func(id string) response {
		req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, b.url+"/webhooks/acme", bytes.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Acme-Delivery", id)
		req.Header.Set("X-Acme-Event", "invoice.paid")
		req.Header.Set("X-Acme-Signature", sig)
		return do(t, req)
	}
	first := send("d-1")
	require.Equal(t, http.StatusAccepted, first.code, first.raw)
	replay := send("d-2")
	require.Equal(t, http.StatusOK, replay.code, replay.raw)
	require.Equal(t, first.EnvelopeID, replay.EnvelopeID)
	require.Equal(t, 1, pgtest.Count(t, b.pool, `SELECT count(*) FROM envelope`))
}

// replay_check: false stores every delivery of such a sender, identical
// bodies under different ids included (a sender whose distinct events can
// be byte-identical).
func TestReplayCheckCanBeTurnedOff(t *testing.T) {
	t.Parallel()
	env := map[string]string{"GITHUB_SECRET": githubSecret}
	cfg, err := config.Parse([]byte(`
sources:
  github:
    provider: github
    secrets: ["${GITHUB_SECRET}"]
    replay_check: false
`), func(k string) string { return env[k] })
	require.NoError(t, err)
	b := serveConfig(t, pgtest.NewPool(t), cfg, ingest.Options{})
	source, d := sample(provider.GitHub, "same-1")
	require.Equal(t, http.StatusAccepted, b.send(t, source, d).code)
	d.DeliveryID = "same-2"
	require.Equal(t, http.StatusAccepted, b.send(t, source, d).code, "another id: stored")
	require.Zero(t, pgtest.Count(t, b.pool, `SELECT count(*) FROM envelope_digest`))
}
