package ingest_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/inboxhq/inbox/internal/pgtest"
	"github.com/inboxhq/inbox/internal/provider"
	"github.com/inboxhq/inbox/internal/webhooktest"
)

// probe is one request of the outside probe of issue 11 (and the ones that
// held then and must keep holding), with the answer it must get. The suite
// runs them all, so a change that reopens one fails here. Probes that are not
// one HTTP request to ingest are pinned elsewhere (docs/security.md lists
// them all with their tests).
type probe struct {
	name string
	// send returns the response to the probe (by HTTP or raw TCP).
	send func(t *testing.T, b *bundle) (*http.Response, []byte)
	code int
	// stored is how many envelopes the probe leaves with delivery id id.
	id     string
	stored int
	check  func(t *testing.T, b *bundle, resp *http.Response, body []byte)
}

func signed(source string, d webhooktest.Delivery, tweak func(*http.Request)) func(t *testing.T, b *bundle) (*http.Response, []byte) {
	return func(t *testing.T, b *bundle) (*http.Response, []byte) {
		req, err := d.Request(context.Background(), b.url+"/webhooks/"+source)
		require.NoError(t, err)
		if tweak != nil {
			tweak(req)
		}
		return roundTrip(t, req)
	}
}

func roundTrip(t *testing.T, req *http.Request) (*http.Response, []byte) {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp, body
}

func githubDelivery(id string, body []byte) webhooktest.Delivery {
	return webhooktest.Delivery{Provider: provider.GitHub, Secret: githubSecret, DeliveryID: id, EventType: "push", Body: body}
}

func payloadIsNull(t *testing.T, b *bundle, id string) {
	require.Equal(t, 1, pgtest.Count(t, b.pool, `SELECT count(*) FROM envelope_with_body WHERE delivery_id = $1 AND payload IS NULL AND body IS NOT NULL`, id))
}

var probes = []probe{
	// 1. Validly signed bodies jsonb cannot hold: stored raw, never 500.
	{name: "lone high surrogate (a string cut inside an emoji)", id: "p-surrogate", code: http.StatusAccepted, stored: 1,
		send:  signed("github", githubDelivery("p-surrogate", []byte(`{"ref":"refs/heads/main","note":"Thanks \ud83d"}`)), nil),
		check: func(t *testing.T, b *bundle, _ *http.Response, _ []byte) { payloadIsNull(t, b, "p-surrogate") }},
	{name: "lone low surrogate", id: "p-low", code: http.StatusAccepted, stored: 1,
		send:  signed("github", githubDelivery("p-low", []byte(`{"ref":"\udc00"}`)), nil),
		check: func(t *testing.T, b *bundle, _ *http.Response, _ []byte) { payloadIsNull(t, b, "p-low") }},
	{name: "number outside numeric", id: "p-1e1000000", code: http.StatusAccepted, stored: 1,
		send:  signed("github", githubDelivery("p-1e1000000", []byte(`{"ref":"x","n":1e1000000}`)), nil),
		check: func(t *testing.T, b *bundle, _ *http.Response, _ []byte) { payloadIsNull(t, b, "p-1e1000000") }},
	{name: "NUL escape", id: "p-nul", code: http.StatusAccepted, stored: 1,
		send:  signed("github", githubDelivery("p-nul", []byte(`{"ref":"a\u0000b"}`)), nil),
		check: func(t *testing.T, b *bundle, _ *http.Response, _ []byte) { payloadIsNull(t, b, "p-nul") }},
	{name: "emoji as a surrogate pair keeps its parsed payload", id: "p-pair", code: http.StatusAccepted, stored: 1,
		send: signed("github", githubDelivery("p-pair", []byte(`{"ref":"\ud83d\ude00"}`)), nil),
		check: func(t *testing.T, b *bundle, _ *http.Response, _ []byte) {
			require.Equal(t, 1, pgtest.Count(t, b.pool, `SELECT count(*) FROM envelope_with_body WHERE delivery_id = 'p-pair' AND payload->>'ref' = '😀'`))
		}},

	// 7. Request ids are the server's; logged request strings are bounded.
	{name: "X-Request-Id of 60 KB is neither echoed nor logged", id: "p-reqid", code: http.StatusUnauthorized,
		send: signed("github", webhooktest.Delivery{Provider: provider.GitHub, Secret: "wrong", DeliveryID: "p-reqid", EventType: "push", Body: []byte(`{}`)},
			func(r *http.Request) { r.Header.Set("X-Request-Id", strings.Repeat("R", 60<<10)) }),
		check: func(t *testing.T, b *bundle, resp *http.Response, body []byte) {
			require.NotContains(t, string(body), "RRRR")
			require.Len(t, resp.Header.Get("X-Request-Id"), 20)
			require.NotContains(t, b.logs.String(), "RRRR")
		}},
	{name: "unknown source name of 60 KB is logged bounded", code: http.StatusNotFound,
		send: func(t *testing.T, b *bundle) (*http.Response, []byte) {
			req, err := http.NewRequest(http.MethodPost, b.url+"/webhooks/"+strings.Repeat("s", 60<<10), strings.NewReader(`{}`))
			require.NoError(t, err)
			return roundTrip(t, req)
		},
		check: func(t *testing.T, b *bundle, _ *http.Response, _ []byte) {
			require.NotContains(t, b.logs.String(), strings.Repeat("s", 200))
		}},

	// 8. Strings for an operator's terminal: accepted and stored as sent;
	// worker envelopes list/show escape them (cmd/worker tests).
	{name: "delivery id with U+202E and U+200B is stored as sent", id: "p-\u202egnp\u200b", code: http.StatusAccepted, stored: 1,
		send: signed("github", githubDelivery("p-\u202egnp\u200b", []byte(`{}`)), func(r *http.Request) { r.Header.Set("User-Agent", "probe\u009b31m") })},

	// 9. Framing and method.
	// Issue 22 (second probe), the ones that are one request to ingest.
	{name: "PRI * is a 404, not a 405 with an empty Allow", code: http.StatusNotFound,
		send: func(t *testing.T, b *bundle) (*http.Response, []byte) {
			conn, err := net.Dial("tcp", strings.TrimPrefix(b.url, "http://"))
			require.NoError(t, err)
			t.Cleanup(func() { conn.Close() })
			require.NoError(t, conn.SetDeadline(time.Now().Add(20*time.Second)))
			_, err = io.WriteString(conn, "PRI * HTTP/1.1\r\nHost: x\r\n\r\n")
			require.NoError(t, err)
			resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
			require.NoError(t, err)
			out, err := io.ReadAll(resp.Body)
			require.NoError(t, err)
			return resp, out
		},
		check: func(t *testing.T, _ *bundle, resp *http.Response, _ []byte) {
			require.Empty(t, resp.Header.Values("Allow"))
		}},
	{name: "a captured GitHub body under a new delivery id is a duplicate, stored once", id: "p-replay-2", code: http.StatusOK, stored: 0,
		send: func(t *testing.T, b *bundle) (*http.Response, []byte) {
			d := githubDelivery("p-replay-1", []byte(`{"ref":"refs/heads/replayed"}`))
			resp, _ := signed("github", d, nil)(t, b)
			require.Equal(t, http.StatusAccepted, resp.StatusCode)
			d.DeliveryID = "p-replay-2"
			return signed("github", d, nil)(t, b)
		},
		check: func(t *testing.T, b *bundle, _ *http.Response, body []byte) {
			require.Contains(t, string(body), `"status":"duplicate"`)
			require.Equal(t, 1, pgtest.Count(t, b.pool, `SELECT count(*) FROM envelope_duplicate WHERE replayed_as = 'p-replay-2'`))
		}},
	{name: "one conflicting variant resent is stored once", id: "p-variant", code: http.StatusOK, stored: 1,
		send: func(t *testing.T, b *bundle) (*http.Response, []byte) {
			resp, _ := signed("github", githubDelivery("p-variant", []byte(`{"ref":"a"}`)), nil)(t, b)
			require.Equal(t, http.StatusAccepted, resp.StatusCode)
			variant := githubDelivery("p-variant", []byte(`{"ref":"b"}`))
			resp, _ = signed("github", variant, nil)(t, b)
			require.Equal(t, http.StatusOK, resp.StatusCode)
			return signed("github", variant, nil)(t, b)
		},
		check: func(t *testing.T, b *bundle, _ *http.Response, _ []byte) {
			require.Equal(t, 2, pgtest.Count(t, b.pool, `SELECT sum(repeats) FROM envelope_conflict WHERE delivery_id = 'p-variant'`))
			require.Equal(t, 1, pgtest.Count(t, b.pool, `SELECT count(*) FROM envelope_conflict WHERE delivery_id = 'p-variant'`))
		}},
	{name: "Content-Length with Transfer-Encoding: chunked closes the connection", id: "p-clte", code: http.StatusAccepted, stored: 1,
		send: func(t *testing.T, b *bundle) (*http.Response, []byte) {
			body := []byte(`{"ref":"clte"}`)
			_, d := sample(provider.GitHub, "p-clte")
			d.Body = body
			h, err := d.Headers()
			require.NoError(t, err)
			conn, err := net.Dial("tcp", strings.TrimPrefix(b.url, "http://"))
			require.NoError(t, err)
			t.Cleanup(func() { conn.Close() })
			require.NoError(t, conn.SetDeadline(time.Now().Add(20*time.Second)))
			var req strings.Builder
			req.WriteString("POST /webhooks/github HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n")
			for k := range h {
				fmt.Fprintf(&req, "%s: %s\r\n", k, h.Get(k))
			}
			fmt.Fprintf(&req, "\r\n%x\r\n%s\r\n0\r\n\r\nGET /healthz HTTP/1.1\r\nHost: x\r\n\r\n", len(body), body)
			_, err = io.WriteString(conn, req.String())
			require.NoError(t, err)
			br := bufio.NewReader(conn)
			resp, err := http.ReadResponse(br, nil)
			require.NoError(t, err)
			out, err := io.ReadAll(resp.Body)
			require.NoError(t, err)
			_, err = br.ReadByte()
			require.ErrorIs(t, err, io.EOF, "connection closed after the response; the smuggled GET is not answered")
			return resp, out
		},
		check: func(t *testing.T, _ *bundle, resp *http.Response, _ []byte) { require.True(t, resp.Close) }},
	{name: "405 says Allow", code: http.StatusMethodNotAllowed,
		send: func(t *testing.T, b *bundle) (*http.Response, []byte) {
			req, err := http.NewRequest(http.MethodGet, b.url+"/webhooks/github", nil)
			require.NoError(t, err)
			return roundTrip(t, req)
		},
		check: func(t *testing.T, _ *bundle, resp *http.Response, _ []byte) {
			require.Equal(t, "POST", resp.Header.Get("Allow"))
		}},

	// What held in the probe and must keep holding.
	{name: "nearly right MAC", id: "p-mac", code: http.StatusUnauthorized,
		send: signed("github", githubDelivery("p-mac", []byte(`{}`)), func(r *http.Request) {
			sig := r.Header.Get("X-Hub-Signature-256")
			last := "0"
			if strings.HasSuffix(sig, "0") {
				last = "1"
			}
			r.Header.Set("X-Hub-Signature-256", sig[:len(sig)-1]+last)
		}),
		check: func(t *testing.T, _ *bundle, _ *http.Response, body []byte) {
			require.NotContains(t, string(body), githubSecret)
			require.NotContains(t, string(body), "sha256=")
		}},
	{name: "signature header missing", id: "p-nosig", code: http.StatusUnauthorized,
		send: signed("github", githubDelivery("p-nosig", []byte(`{}`)), func(r *http.Request) { r.Header.Del("X-Hub-Signature-256") })},
	{name: "stale Stripe timestamp", id: "evt_p_stale", code: http.StatusUnauthorized,
		send: signed("stripe", webhooktest.Delivery{Provider: provider.Stripe, Secret: stripeSecret, DeliveryID: "evt_p_stale",
			Body: webhooktest.StripePayment("evt_p_stale", "pi_1", 1, "usd"), SignedAt: time.Now().Add(-time.Hour)}, nil)},
	{name: "delivery id over 512 bytes", id: strings.Repeat("d", 513), code: http.StatusBadRequest,
		send: signed("github", githubDelivery(strings.Repeat("d", 513), []byte(`{}`)), nil)},
	{name: "body over the limit", id: "p-big", code: http.StatusRequestEntityTooLarge,
		send: signed("shopify", webhooktest.Delivery{Provider: provider.Shopify, Secret: shopifySecret, DeliveryID: "p-big", EventType: "orders/paid",
			Body: []byte(`{"id":1,"pad":"` + strings.Repeat("x", 4096) + `"}`)}, nil)},
	{name: "unknown source", code: http.StatusNotFound,
		send: signed("nope", githubDelivery("p-unknown", []byte(`{}`)), nil)},
	{name: "duplicate delivery", id: "p-dup", code: http.StatusOK, stored: 1,
		send: func(t *testing.T, b *bundle) (*http.Response, []byte) {
			d := githubDelivery("p-dup", []byte(`{"ref":"dup"}`))
			resp, _ := signed("github", d, nil)(t, b)
			require.Equal(t, http.StatusAccepted, resp.StatusCode)
			return signed("github", d, nil)(t, b)
		}},
}

func TestProbeCorpus(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, p := range probes {
		t.Run(p.name, func(t *testing.T) {
			resp, body := p.send(t, b)
			require.Equal(t, p.code, resp.StatusCode, "%s", body)
			require.Equal(t, "application/json", resp.Header.Get("Content-Type"))
			var eb struct {
				Status string `json:"status"`
			}
			require.NoError(t, json.Unmarshal(body, &eb), "%s", body)
			if p.id != "" {
				require.Equal(t, p.stored, pgtest.Count(t, b.pool, `SELECT count(*) FROM envelope WHERE delivery_id = $1`, p.id))
			}
			if p.check != nil {
				p.check(t, b, resp, body)
			}
		})
	}
	require.NotContains(t, b.logs.String(), `"status":500`, "no probe is a 500")
	for _, s := range secrets {
		require.NotContains(t, b.logs.String(), s)
	}
}
