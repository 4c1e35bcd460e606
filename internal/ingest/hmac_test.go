package ingest_test

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/inboxhq/inbox/internal/config"
	"github.com/inboxhq/inbox/internal/ingest"
	"github.com/inboxhq/inbox/internal/pgtest"
)

// A generic HMAC source is configuration only: a Slack Events API delivery,
// signed as Slack signs, is stored with provider hmac, its event_id as the
// delivery id and event.type as the event type; a retry is a duplicate.
func TestHMACSourceFromConfig(t *testing.T) {
	t.Parallel()
	const secret = "slack-signing-secret-for-tests"
	cfg, err := config.Parse([]byte(`
sources:
  slack:
    provider: hmac
    secrets: ["${SLACK_SIGNING_SECRET}"]
    hmac: {preset: slack}
`), func(k string) string { return map[string]string{"SLACK_SIGNING_SECRET": secret}[k] })
	require.NoError(t, err)
	b := serveConfig(t, pgtest.NewPool(t), cfg, ingest.Options{})
	pool := b.pool

	body := []byte(`{"token":"x","team_id":"T1","type":"event_callback","event_id":"Ev08MFMKH6","event_time":1700000000,"event":{"type":"app_mention","user":"U1","text":"hi"}}`)
	send := func(body []byte, at time.Time, secret string) response {
		ts := fmt.Sprint(at.Unix())
		m := hmac.New(sha256.New, []byte(secret))
		fmt.Fprintf(m, "v0:%s:%s", ts, body)
		req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, b.url+"/webhooks/slack", bytes.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Slack-Request-Timestamp", ts)
		req.Header.Set("X-Slack-Signature", "v0="+hex.EncodeToString(m.Sum(nil)))
		return do(t, req)
	}
	r := send(body, time.Now(), secret)
	require.Equal(t, http.StatusAccepted, r.code, r.raw)
	var prov, id, typ string
	var stored []byte
	require.NoError(t, pool.QueryRow(context.Background(), `SELECT provider, delivery_id, event_type, body FROM envelope_with_body WHERE id = $1`, r.EnvelopeID).
		Scan(&prov, &id, &typ, &stored))
	require.Equal(t, [3]string{"hmac", "Ev08MFMKH6", "app_mention"}, [3]string{prov, id, typ})
	require.Equal(t, body, stored)

	// Slack retries with the same event_id: a duplicate.
	r = send(body, time.Now().Add(time.Second), secret)
	require.Equal(t, http.StatusOK, r.code, r.raw)
	require.Equal(t, "duplicate", r.Status)

	r = send(body, time.Now(), "not the secret")
	require.Equal(t, http.StatusUnauthorized, r.code, r.raw)
	require.NotContains(t, r.raw, secret)
	r = send(body, time.Now().Add(-10*time.Minute), secret)
	require.Equal(t, http.StatusUnauthorized, r.code, r.raw)
}
