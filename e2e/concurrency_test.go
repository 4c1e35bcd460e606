package e2e

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/inboxhq/inbox/internal/pgtest"
	"github.com/inboxhq/inbox/internal/provider"
	"github.com/inboxhq/inbox/internal/webhooktest"
)

// sendAtOnce builds every request first, then releases them together from a
// start barrier, and returns the status codes.
func sendAtOnce(t *testing.T, s *stack, source string, ds []webhooktest.Delivery) []int {
	t.Helper()
	client := &http.Client{
		Timeout:   30 * time.Second,
		Transport: &http.Transport{MaxIdleConnsPerHost: len(ds), DisableCompression: true},
	}
	defer client.CloseIdleConnections()
	reqs := make([]*http.Request, len(ds))
	for i, d := range ds {
		var err error
		reqs[i], err = d.Request(context.Background(), s.ingestURL+"/webhooks/"+source)
		require.NoError(t, err)
	}
	codes := make([]int, len(reqs))
	errs := make([]error, len(reqs))
	var ready, done sync.WaitGroup
	gate := make(chan struct{})
	for i, req := range reqs {
		ready.Add(1)
		done.Add(1)
		go func() {
			defer done.Done()
			ready.Done()
			<-gate
			resp, err := client.Do(req)
			if err != nil {
				errs[i] = err
				return
			}
			resp.Body.Close()
			codes[i] = resp.StatusCode
		}()
	}
	ready.Wait() // every sender is parked at the gate
	close(gate)
	done.Wait()
	for i, err := range errs {
		require.NoError(t, err, "request %d", i)
	}
	return codes
}

func countCodes(codes []int) map[int]int {
	m := map[int]int{}
	for _, c := range codes {
		m[c]++
	}
	return m
}

// waitFinal waits until the database holds want envelopes, none pending,
// and no processing job is left (the worker deletes an envelope's job in
// the transaction that finishes it).
func waitFinal(t *testing.T, s *stack, want int) {
	t.Helper()
	eventually(t, 60*time.Second, "envelopes final and their jobs deleted", func(ctx context.Context) (bool, string) {
		var total, pending, open int
		if err := s.pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM envelope),
			(SELECT count(*) FROM envelope WHERE status = 'pending'),
			(SELECT count(*) FROM river_job WHERE kind = 'process_envelope')`).Scan(&total, &pending, &open); err != nil {
			return false, err.Error()
		}
		return total == want && pending == 0 && open == 0,
			fmt.Sprintf("%d envelopes (want %d), %d pending, %d processing jobs left", total, want, pending, open)
	})
}

// TestEndToEndConcurrentIdenticalDeliveries: 50 copies of one Standard
// Webhooks payment (same webhook-id, same body, each signed afresh) reach
// the real ingest at the same moment while the worker runs. One is
// accepted, 49 are duplicates, and the payment is posted once.
func TestEndToEndConcurrentIdenticalDeliveries(t *testing.T) {
	t.Parallel()
	s := startStack(t, pgtest.NewURL(t))

	const copies = 50
	pay := fmt.Sprintf("pay_same_%d", time.Now().UnixNano())
	d := webhooktest.Delivery{Provider: provider.Standard, Secret: e2eSecrets["E2E_STANDARD_SECRET"], DeliveryID: "msg_" + pay,
		Body: webhooktest.StandardPayment(pay, "m_conc", 12345, "EUR")}
	ds := make([]webhooktest.Delivery, copies)
	for i := range ds {
		ds[i] = d
	}
	require.Equal(t, map[int]int{http.StatusAccepted: 1, http.StatusOK: copies - 1}, countCodes(sendAtOnce(t, s, "payments", ds)))

	waitFinal(t, s, 1)
	require.EqualValues(t, 1, s.scalar(t, "SELECT count(*) FROM envelope WHERE delivery_id = $1 AND status = 'done'", "msg_"+pay))
	requireOneJobEachDeleted(t, s, 1)
	require.EqualValues(t, 1, s.scalar(t, "SELECT count(*) FROM ledger_transaction"))
	require.EqualValues(t, 1, s.scalar(t, "SELECT count(*) FROM ledger_transaction lt JOIN envelope e ON e.id = lt.envelope_id WHERE lt.kind = 'payment' AND lt.amount_minor = 12345"))
	require.EqualValues(t, 2, s.scalar(t, "SELECT count(*) FROM ledger_entry"))
	require.EqualValues(t, 0, s.scalar(t, "SELECT sum(amount_minor) FROM ledger_entry"))
	require.EqualValues(t, 1, s.scalar(t, "SELECT count(*) FROM envelope WHERE (result->>'posted')::boolean"))
	require.EqualValues(t, 12345, s.scalar(t, `SELECT balance_minor FROM ledger_balance WHERE merchant = 'm_conc' AND account = 'psp_clearing' AND currency = 'EUR'`))
}

// TestEndToEndConcurrentSamePaymentDifferentDeliveryIDs: one payment sent
// twice at the same moment under two delivery ids (a provider that re-sent
// the event as a new message). Both are stored and processed; the ledger
// posts the payment once, and the other envelope records that it did not.
func TestEndToEndConcurrentSamePaymentDifferentDeliveryIDs(t *testing.T) {
	t.Parallel()
	s := startStack(t, pgtest.NewURL(t))

	pay := fmt.Sprintf("pay_twice_%d", time.Now().UnixNano())
	body := webhooktest.StandardPayment(pay, "m_conc2", 777, "GBP")
	ds := []webhooktest.Delivery{
		{Provider: provider.Standard, Secret: e2eSecrets["E2E_STANDARD_SECRET"], DeliveryID: "msg_a_" + pay, Body: body},
		{Provider: provider.Standard, Secret: e2eSecrets["E2E_STANDARD_SECRET"], DeliveryID: "msg_b_" + pay, Body: body},
	}
	require.Equal(t, map[int]int{http.StatusAccepted: 2}, countCodes(sendAtOnce(t, s, "payments", ds)))

	waitFinal(t, s, 2)
	require.EqualValues(t, 2, s.scalar(t, "SELECT count(*) FROM envelope WHERE status = 'done'"))
	requireOneJobEachDeleted(t, s, 2)
	require.EqualValues(t, 1, s.scalar(t, "SELECT count(*) FROM ledger_transaction"))
	require.EqualValues(t, 2, s.scalar(t, "SELECT count(*) FROM ledger_entry"))
	require.EqualValues(t, 0, s.scalar(t, "SELECT sum(amount_minor) FROM ledger_entry"))
	// One envelope posted it; the other's result says posted=false and
	// points at the same transaction.
	require.EqualValues(t, 1, s.scalar(t, "SELECT count(*) FROM envelope WHERE (result->>'posted')::boolean"))
	require.EqualValues(t, 1, s.scalar(t, "SELECT count(*) FROM envelope WHERE NOT (result->>'posted')::boolean AND result->>'reason' <> ''"))
	require.EqualValues(t, 1, s.scalar(t, `SELECT count(*) FROM envelope e JOIN ledger_transaction lt ON lt.envelope_id = e.id WHERE (e.result->>'posted')::boolean`))
	require.EqualValues(t, 2, s.scalar(t, `SELECT count(*) FROM envelope e JOIN ledger_transaction lt ON (e.result->>'ledger_transaction_id')::bigint = lt.id`))
	require.EqualValues(t, 777, s.scalar(t, `SELECT balance_minor FROM ledger_balance WHERE merchant = 'm_conc2' AND account = 'psp_clearing' AND currency = 'GBP'`))
}
