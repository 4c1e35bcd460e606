package e2e

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/inboxhq/inbox/examples/customers"
	"github.com/inboxhq/inbox/internal/pgtest"
	"github.com/inboxhq/inbox/internal/provider"
	"github.com/inboxhq/inbox/internal/webhooktest"
)

// A team's own handler (examples/customers) registered from the command
// line (worker run --handlers customers): a Standard Webhooks sender's
// customer events go through ingest's signature check and the worker, as
// its own role, into the team's own table; a resend is a duplicate that
// changes nothing, an older version arriving late changes nothing, and an
// event the package does not route stays ignored.
func TestOwnHandlerEndToEnd(t *testing.T) {
	t.Parallel()
	s := startStack(t, pgtest.NewURL(t), "--handlers", "customers")
	ctx := context.Background()
	// The team's own migration, and the grant docs/handlers.md asks for.
	_, err := s.pool.Exec(ctx, customers.Schema+`; GRANT SELECT, INSERT, UPDATE ON crm_customer TO inbox_worker`)
	require.NoError(t, err)

	secret := e2eSecrets["E2E_STANDARD_SECRET"]
	t0 := time.Now().Add(-time.Hour).Unix()
	customer := func(msg, event, email string, updated int64) webhooktest.Delivery {
		return webhooktest.Delivery{Provider: provider.Standard, Secret: secret, DeliveryID: msg,
			Body: fmt.Appendf(nil, `{"type":%q,"data":{"id":"cus_e2e","email":%q,"name":"Ada","updated_at":%d}}`, event, email, updated)}
	}
	send := func(d webhooktest.Delivery, want int) {
		t.Helper()
		code, err := s.send(d, "payments")
		require.NoError(t, err)
		require.Equal(t, want, code, d.DeliveryID)
	}
	final := func(want int64) {
		t.Helper()
		pgtest.Eventually(t, 60*time.Second, "the envelopes final", func() (bool, string) {
			n := s.scalar(t, `SELECT count(*) FROM envelope WHERE status <> 'pending'`)
			return n == want, fmt.Sprintf("%d of %d final", n, want)
		})
	}
	send(customer("msg_c1", "customer.created", "a@example.com", t0), http.StatusAccepted)
	send(customer("msg_c1", "customer.created", "a@example.com", t0), http.StatusOK) // the provider's retry
	send(customer("msg_c2", "customer.updated", "b@example.com", t0+60), http.StatusAccepted)
	final(2)
	send(customer("msg_c3", "customer.updated", "old@example.com", t0+30), http.StatusAccepted) // late, and older
	send(customer("msg_c4", "customer.deleted", "b@example.com", t0+90), http.StatusAccepted)   // not routed
	final(4)
	var email string
	var by int64
	require.NoError(t, s.pool.QueryRow(ctx, `SELECT email, envelope_id FROM crm_customer WHERE id = 'cus_e2e'`).Scan(&email, &by))
	require.Equal(t, "b@example.com", email, "the newest version wins")
	require.Equal(t, s.scalar(t, `SELECT id FROM envelope WHERE delivery_id = 'msg_c2'`), by, "the row names the delivery that wrote it")
	require.Equal(t, int64(3), s.scalar(t, `SELECT count(*) FROM envelope WHERE status = 'done' AND event_type LIKE 'customer.%' AND delivery_id IN ('msg_c1', 'msg_c2', 'msg_c3')`))
	require.Equal(t, int64(1), s.scalar(t, `SELECT count(*) FROM envelope WHERE delivery_id = 'msg_c4' AND status = 'ignored'`))
	require.Zero(t, s.scalar(t, `SELECT count(*) FROM envelope WHERE delivery_id = 'msg_c3' AND (result->>'applied')::boolean`), "the late, older version changed nothing")
}
