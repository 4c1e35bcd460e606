package ingest_test

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/inboxhq/inbox/internal/ingest"
	"github.com/inboxhq/inbox/internal/pgtest"
	"github.com/inboxhq/inbox/internal/provider"
	"github.com/inboxhq/inbox/internal/webhooktest"
)

// jsonbUnsafe are JSON fragments valid for encoding/json that PostgreSQL's
// jsonb refuses.
var jsonbUnsafe = map[string]string{
	"lone high surrogate":   `"Thanks \ud83d"`,
	"lone low surrogate":    `"\ude00 there"`,
	"number beyond numeric": `1e1000000`,
	"scale beyond numeric":  `1e-1000000`,
	"NUL escape":            `"a\u0000b"`,
}

// A validly signed body that jsonb cannot hold is stored byte-exact with a
// NULL payload and answered 202 (then 200 duplicate), for every provider:
// never a 500 on every retry.
func TestBodyJSONBCannotHoldIsStoredRaw(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, p := range provider.Names {
		for name, frag := range jsonbUnsafe {
			t.Run(p+"/"+name, func(t *testing.T) {
				id := fmt.Sprintf("evt_jsonb_%s_%x", p, sha256.Sum256([]byte(name)))[:40]
				source, d := sample(p, id)
				d.Body = fmt.Appendf(nil, `{"id":%q,"object":"event","type":"payment.succeeded","note":%s,"data":{"object":{}}}`, id, frag)
				r := b.send(t, source, d)
				require.Equal(t, http.StatusAccepted, r.code, r.raw)
				require.Equal(t, 1, pgtest.Count(t, b.pool, `SELECT count(*) FROM envelope_with_body WHERE id = $1 AND body = $2 AND payload IS NULL`, r.EnvelopeID, d.Body))
				require.Equal(t, 1, pgtest.Count(t, b.pool, `SELECT count(*) FROM river_job WHERE (args->>'envelope_id')::bigint = $1`, r.EnvelopeID))
				again := b.send(t, source, d)
				require.Equal(t, http.StatusOK, again.code, again.raw)
				require.Equal(t, r.EnvelopeID, again.EnvelopeID)
			})
		}
	}
}

// FuzzIngest signs arbitrary bodies with the source's real secret and drives
// them through the real HTTP handler into a real database. The oracle: a 2xx
// has the body stored exactly once under the answered envelope id, with its
// job; a 4xx stores no envelope; a 5xx never happens while the database is
// healthy. The seed corpus runs with every go test; make fuzz runs it long.
func FuzzIngest(f *testing.F) {
	pool := pgtest.NewPool(f)
	b := serve(f, pool, ingest.Options{})
	seeds := [][]byte{
		webhooktest.StripePayment("evt_seed", "pi_seed", 100, "usd"),
		webhooktest.StandardPayment("pay_seed", "m_1", 1500, "EUR"),
		[]byte(`{"id":"evt_x","type":"t"}`),
		[]byte(`{"id":"evt_x","type":"t","a":[1,2,{"b":null}]}`),
		[]byte(`{"id":"evt_big","type":"t","n":1e1000000}`),
		[]byte(`{"id":"evt_sur","type":"t","s":"\ud83d"}`),
		[]byte(`{"id":"evt_pair","type":"t","s":"\ud83d\ude00"}`),
		[]byte(`{"id":"evt_nul","type":"t","s":"\u0000"}`),
		[]byte(`{"id":"evt_deep","type":"t","d":` + strings.Repeat("[", 1100) + strings.Repeat("]", 1100) + `}`),
		[]byte(`{"id":"evt_utf8","type":"t","s":"` + "\xff\xfe" + `"}`),
		[]byte(`{"id":"evt_\u202e","type":"t"}`),
		[]byte(`{"id":1,"type":2}`),
		[]byte(`[]`),
		[]byte(`"just a string"`),
		[]byte(`not json`),
		[]byte{},
	}
	for i, s := range seeds {
		for p := range provider.Names {
			f.Add(uint8(p), uint8(i), s)
		}
	}
	var n atomic.Int64
	f.Fuzz(func(t *testing.T, p, variant uint8, body []byte) {
		prov := provider.Names[int(p)%len(provider.Names)]
		source, d := sample(prov, fmt.Sprintf("fz-%d-%d", n.Add(1), variant))
		d.Body = body
		req, err := d.Request(context.Background(), b.url+"/webhooks/"+source)
		require.NoError(t, err)
		before := pgtest.Count(t, b.pool, `SELECT count(*) FROM envelope`)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		raw, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.NoError(t, err)
		after := pgtest.Count(t, b.pool, `SELECT count(*) FROM envelope`)
		switch code := resp.StatusCode; {
		case code >= 500:
			t.Fatalf("%s: %d %s for body %q", prov, code, raw, body)
		case code >= 400:
			require.Equal(t, before, after, "a %d stored an envelope: %s", code, raw)
		case code >= 200 && code < 300:
			var res struct {
				EnvelopeID int64 `json:"envelope_id"`
			}
			require.NoError(t, json.Unmarshal(raw, &res), "%s", raw)
			// Stored under that envelope, or (a resend of its delivery id with
			// another body, answered 200 duplicate) recorded as its conflict.
			require.Equal(t, 1, pgtest.Count(t, b.pool, `SELECT count(*) FROM envelope_with_body WHERE id = $1 AND source = $2 AND body = $3`, res.EnvelopeID, source, body)+
				pgtest.Count(t, b.pool, `SELECT least(count(*), 1) FROM envelope_conflict WHERE envelope_id = $1 AND source = $2 AND body = $3`, res.EnvelopeID, source, body),
				"a %d must have this body stored under envelope %d or recorded as its conflict", code, res.EnvelopeID)
			require.Equal(t, 1, pgtest.Count(t, b.pool, `SELECT count(*) FROM river_job WHERE kind = 'process_envelope' AND (args->>'envelope_id')::bigint = $1`, res.EnvelopeID))
			wantNew := 0
			if code == http.StatusAccepted {
				wantNew = 1
			}
			require.Equal(t, before+wantNew, after)
			if pgtest.Count(t, b.pool, `SELECT count(*) FROM envelope_with_body WHERE id = $1 AND payload IS NOT NULL`, res.EnvelopeID) == 1 {
				// A stored payload is the body, parsed.
				require.Equal(t, 1, pgtest.Count(t, b.pool, `SELECT count(*) FROM envelope_with_body WHERE id = $1 AND payload = convert_from(body, 'UTF8')::jsonb`, res.EnvelopeID))
			}
		default:
			t.Fatalf("%s: unexpected status %d %s", prov, code, raw)
		}
	})
}
