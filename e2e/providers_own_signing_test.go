package e2e

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	"github.com/stretchr/testify/require"
	"github.com/stripe/stripe-go/v82/webhook"

	"github.com/inboxhq/inbox/internal/pgtest"
	"github.com/inboxhq/inbox/internal/webhooktest"
)

// rawDelivery is a request signed outside our code: the headers are sent
// as they are.
type rawDelivery struct {
	name   string
	source string
	header http.Header
	body   []byte
}

// request builds the POST of r to base's ingest.
func (r rawDelivery) request(ctx context.Context, base string) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/webhooks/"+r.source, bytes.NewReader(r.body))
	if err != nil {
		return nil, err
	}
	req.Header = r.header.Clone()
	req.Header.Set("Content-Type", "application/json")
	return req, nil
}

// stripeGoSigned signs body with stripe-go's own test signer.
func stripeGoSigned(t *testing.T, name string, body []byte) rawDelivery {
	t.Helper()
	p := webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{
		Payload: body, Secret: e2eSecrets["E2E_STRIPE_SECRET"], Timestamp: time.Now(),
	})
	require.NotEmpty(t, p.Header)
	return rawDelivery{name: name, source: "stripe", header: http.Header{"Stripe-Signature": {p.Header}}, body: body}
}

// libraryStandardSigned signs body with the Standard Webhooks Go library.
func libraryStandardSigned(t *testing.T, name, msgID string, body []byte) rawDelivery {
	t.Helper()
	wh, err := standardwebhooks.NewWebhook(e2eSecrets["E2E_STANDARD_SECRET"])
	require.NoError(t, err)
	at := time.Now()
	sig, err := wh.Sign(msgID, at, body)
	require.NoError(t, err)
	h := http.Header{}
	h.Set("webhook-id", msgID)
	h.Set("webhook-timestamp", strconv.FormatInt(at.Unix(), 10))
	h.Set("webhook-signature", sig)
	// The library's verifier accepts what it signed: the headers are right.
	require.NoError(t, wh.Verify(body, h))
	return rawDelivery{name: name, source: "payments", header: h, body: body}
}

// TestEndToEndProvidersOwnSigning sends deliveries signed by stripe-go and by
// the Standard Webhooks Go library, not by provider.Sign, to the real ingest
// and worker, each twice at once.
func TestEndToEndProvidersOwnSigning(t *testing.T) {
	t.Parallel()
	s := startStack(t, pgtest.NewURL(t), "--snooze", "200ms")

	run := fmt.Sprintf("own%d", time.Now().UnixNano())
	pi, ch := "pi_"+run, "ch_"+run
	evtPay, evtRef := "evt_"+run+"_pay", "evt_"+run+"_ref"
	pay := "pay_" + run
	all := []rawDelivery{
		stripeGoSigned(t, "stripe payment", webhooktest.StripePayment(evtPay, pi, 4200, "usd")),
		stripeGoSigned(t, "stripe refund", webhooktest.StripeRefund(evtRef, ch, pi, 4200, 700, "usd")),
		libraryStandardSigned(t, "standard payment", "msg_"+pay, webhooktest.StandardPayment(pay, "m_own", 9100, "EUR")),
		libraryStandardSigned(t, "standard refund", "msg_ref_"+pay, webhooktest.StandardRefund("re_"+pay, pay, "m_own", 1100, "EUR")),
	}

	// Each delivery twice, everything at once.
	type answer struct {
		name string
		code int
		err  error
	}
	answers := make(chan answer, 2*len(all))
	startGate := make(chan struct{})
	var wg sync.WaitGroup
	for range 2 {
		for _, d := range all {
			req, err := d.request(context.Background(), s.ingestURL)
			require.NoError(t, err)
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-startGate
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					answers <- answer{d.name, 0, err}
					return
				}
				resp.Body.Close()
				answers <- answer{d.name, resp.StatusCode, nil}
			}()
		}
	}
	close(startGate)
	wg.Wait()
	close(answers)
	codes := map[string][]int{}
	for a := range answers {
		require.NoError(t, a.err, a.name)
		codes[a.name] = append(codes[a.name], a.code)
	}
	for _, d := range all {
		require.ElementsMatch(t, []int{http.StatusAccepted, http.StatusOK}, codes[d.name], "%s: one 202 and one 200 (duplicate)", d.name)
	}

	eventually(t, 60*time.Second, "every envelope final", func(ctx context.Context) (bool, string) {
		var total, pending int
		if err := s.pool.QueryRow(ctx, "SELECT count(*), count(*) FILTER (WHERE status = 'pending') FROM envelope").Scan(&total, &pending); err != nil {
			return false, err.Error()
		}
		return total == len(all) && pending == 0, fmt.Sprintf("%d envelopes, %d pending", total, pending)
	})

	require.EqualValues(t, len(all), s.scalar(t, "SELECT count(*) FROM envelope"))
	require.EqualValues(t, len(all), s.scalar(t, "SELECT count(*) FROM envelope WHERE status = 'done'"))
	for _, id := range []string{evtPay, evtRef} {
		require.EqualValues(t, 1, s.scalar(t, "SELECT count(*) FROM envelope WHERE source = 'stripe' AND delivery_id = $1 AND status = 'done'", id), id)
	}
	for _, id := range []string{"msg_" + pay, "msg_ref_" + pay} {
		require.EqualValues(t, 1, s.scalar(t, "SELECT count(*) FROM envelope WHERE source = 'payments' AND delivery_id = $1 AND status = 'done'", id), id)
	}

	// Exactly one ledger transaction per payment event and per refund, each
	// posted by its own envelope, each balanced.
	require.EqualValues(t, len(all), s.scalar(t, "SELECT count(*) FROM ledger_transaction"))
	require.EqualValues(t, 2, s.scalar(t, "SELECT count(*) FROM ledger_transaction WHERE kind = 'payment'"))
	require.EqualValues(t, 2, s.scalar(t, "SELECT count(*) FROM ledger_transaction WHERE kind = 'refund'"))
	require.EqualValues(t, len(all), s.scalar(t, `SELECT count(*) FROM envelope e JOIN ledger_transaction lt ON lt.envelope_id = e.id`))
	require.EqualValues(t, len(all), s.scalar(t, `SELECT count(*) FROM envelope WHERE (result->>'posted')::boolean`))
	require.EqualValues(t, 0, s.scalar(t, `SELECT count(*) FROM ledger_transaction lt WHERE NOT EXISTS (SELECT 1 FROM ledger_entry le WHERE le.transaction_id = lt.id)`))
	require.EqualValues(t, 0, s.scalar(t, `SELECT count(*) FROM (SELECT transaction_id, currency FROM ledger_entry GROUP BY 1, 2 HAVING sum(amount_minor) <> 0) x`))
	require.EqualValues(t, 4200-700, s.scalar(t, `SELECT balance_minor FROM ledger_balance WHERE merchant = 'stripe' AND account = 'psp_clearing' AND currency = 'USD'`))
	require.EqualValues(t, 9100-1100, s.scalar(t, `SELECT balance_minor FROM ledger_balance WHERE merchant = 'm_own' AND account = 'psp_clearing' AND currency = 'EUR'`))

	requireOneJobEachDeleted(t, s, len(all))
}
