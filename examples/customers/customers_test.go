package customers_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/inboxhq/inbox/examples/customers"
	"github.com/inboxhq/inbox/internal/envelope"
	"github.com/inboxhq/inbox/internal/handlers"
	"github.com/inboxhq/inbox/internal/handlers/handlerstest"
	"github.com/inboxhq/inbox/internal/provider"
)

func body(id, email string, updated time.Time) []byte {
	return fmt.Appendf(nil, `{"type":"customer.updated","data":{"id":%q,"email":%q,"name":"Ada","updated_at":%d}}`, id, email, updated.Unix())
}

// The handler run by the real worker: a new customer is stored with its
// delivery, a newer version replaces it, an older one (late, or replayed)
// changes nothing and says so, and a body without an id fails for good
// with the cause "permanent" on its first attempt. An event it does not
// route is ignored.
func TestCustomersHandler(t *testing.T) {
	t.Parallel()
	r := handlers.Builtin()
	customers.Register(r)
	kit := handlerstest.New(t, r)
	ctx := context.Background()
	_, err := kit.Pool.Exec(ctx, customers.Schema)
	require.NoError(t, err)

	t0 := time.Now().Add(-time.Hour).Truncate(time.Second)
	deliver := func(event string, b []byte) (int64, handlerstest.Outcome) {
		id := kit.Deliver(t, handlerstest.Delivery{Provider: provider.Standard, EventType: event, Body: b})
		return id, kit.Wait(t, id)
	}
	result := func(o handlerstest.Outcome) customers.Result {
		var r customers.Result
		require.NoError(t, json.Unmarshal(o.Result, &r), string(o.Result))
		return r
	}
	row := func() (email string, envelopeID int64) {
		require.NoError(t, kit.Pool.QueryRow(ctx, `SELECT email, envelope_id FROM crm_customer WHERE id = 'cus_1'`).Scan(&email, &envelopeID))
		return email, envelopeID
	}

	first, o := deliver("customer.created", body("cus_1", "a@example.com", t0))
	require.Equal(t, envelope.StatusDone, o.Status, o.LastError)
	require.Equal(t, customers.Result{Customer: "cus_1", Applied: true}, result(o))
	email, by := row()
	require.Equal(t, []any{"a@example.com", first}, []any{email, by})

	second, o := deliver("customer.updated", body("cus_1", "b@example.com", t0.Add(time.Minute)))
	require.Equal(t, envelope.StatusDone, o.Status)
	email, by = row()
	require.Equal(t, []any{"b@example.com", second}, []any{email, by})

	_, o = deliver("customer.updated", body("cus_1", "stale@example.com", t0.Add(-time.Minute)))
	require.Equal(t, envelope.StatusDone, o.Status)
	require.Equal(t, customers.Result{Customer: "cus_1", Applied: false}, result(o), "an older version changes nothing")
	email, _ = row()
	require.Equal(t, "b@example.com", email)

	// Two changes in one second: the later-stored delivery wins.
	_, o = deliver("customer.updated", body("cus_1", "c@example.com", t0.Add(time.Minute)))
	require.Equal(t, customers.Result{Customer: "cus_1", Applied: true}, result(o))
	email, _ = row()
	require.Equal(t, "c@example.com", email)

	_, o = deliver("customer.updated", []byte(`{"data":{"id":"cus_2","email":"x@example.com","updated_at":99999999999999}}`))
	require.Equal(t, envelope.StatusFailed, o.Status, "a time out of range fails for good")
	require.Equal(t, 1, o.Attempts)

	_, o = deliver("customer.created", []byte(`{"data":{"email":"x@example.com","updated_at":1}}`))
	require.Equal(t, envelope.StatusFailed, o.Status)
	require.Equal(t, 1, o.Attempts, "a permanent error is not retried")
	require.Equal(t, "permanent", o.LastCause)
	require.Contains(t, o.LastError, "data.id, data.email and data.updated_at are required")

	_, o = deliver("customer.deleted", body("cus_1", "c@example.com", t0.Add(2*time.Minute)))
	require.Equal(t, envelope.StatusIgnored, o.Status, "no route")
}
