// Package customers is an example of a handler for a team's own events and
// table, written as docs/handlers.md describes: a Standard Webhooks sender's
// customer.created and customer.updated events kept in the team's own
// crm_customer table, in the worker's transaction, so the row changes
// exactly when the envelope is marked done.
//
// It is not part of the built-in registry: a team registers its handlers on
// handlers.Builtin() in its own build of cmd/worker (see Register).
package customers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/inboxhq/inbox/internal/handlers"
	"github.com/inboxhq/inbox/internal/provider"
)

// Schema is the team's own table, created by the team's own migration (a
// goose file next to the project's, or their usual tool). updated_at is the
// sender's time of the change (seconds): a delivery older than the row, or
// of the same second and stored earlier, changes nothing, so a retry, a
// replay or an out-of-order delivery is harmless.
const Schema = `
CREATE TABLE IF NOT EXISTS crm_customer (
    id          text        PRIMARY KEY,
    email       text        NOT NULL,
    name        text        NOT NULL DEFAULT '',
    updated_at  timestamptz NOT NULL,
    envelope_id bigint      NOT NULL -- the delivery that wrote this version: the audit link
)`

// Register routes the events this package handles on r.
func Register(r *handlers.Registry) {
	h := handlers.HandlerFunc(Handle)
	r.Register(provider.Standard, "customer.created", h)
	r.Register(provider.Standard, "customer.updated", h)
}

// event is the part of the body the handler reads.
type event struct {
	Data struct {
		ID        string `json:"id"`
		Email     string `json:"email"`
		Name      string `json:"name"`
		UpdatedAt int64  `json:"updated_at"` // Unix seconds
	} `json:"data"`
}

// Result is what the handler returns: the worker stores it as
// envelope.result, what an operator reads on the envelope's page.
type Result struct {
	Customer string `json:"customer"`
	// Applied is false when the table already held this version or a newer
	// one (a retry, a replay, or a late delivery).
	Applied bool `json:"applied"`
}

// maxUpdatedAt is the last second of year 9999: later is not a time
// PostgreSQL's timestamptz holds (nor a plausible one).
const maxUpdatedAt = 253402300799

// Handle upserts the customer, newest version wins, inside run.Tx: the
// sender's updated_at, then (two changes in one second) the later-stored
// delivery. It never commits or rolls back run.Tx: the worker does, with the
// envelope's status.
func Handle(ctx context.Context, run handlers.Run) (json.RawMessage, error) {
	env := run.Envelope
	var ev event
	if err := json.Unmarshal(env.Document(), &ev); err != nil {
		// Retrying cannot fix a body that does not parse: fail for good.
		return nil, handlers.Permanent(fmt.Errorf("customer event: %w", err))
	}
	d := ev.Data
	if d.ID == "" || d.Email == "" || d.UpdatedAt <= 0 {
		return nil, handlers.Permanent(errors.New("customer event: data.id, data.email and data.updated_at are required"))
	}
	if d.UpdatedAt > maxUpdatedAt {
		// Out of PostgreSQL's range: a retry would fail the same way.
		return nil, handlers.Permanent(fmt.Errorf("customer event: data.updated_at %d is not a Unix time in seconds", d.UpdatedAt))
	}
	tag, err := run.Tx.Exec(ctx, `
		INSERT INTO crm_customer (id, email, name, updated_at, envelope_id) VALUES ($1, $2, $3, $4, $5)
		ON CONFLICT (id) DO UPDATE SET email = EXCLUDED.email, name = EXCLUDED.name,
		       updated_at = EXCLUDED.updated_at, envelope_id = EXCLUDED.envelope_id
		 WHERE (crm_customer.updated_at, crm_customer.envelope_id) < (EXCLUDED.updated_at, EXCLUDED.envelope_id)`,
		d.ID, d.Email, d.Name, time.Unix(d.UpdatedAt, 0).UTC(), env.ID)
	if err != nil {
		// A database error is transient: the worker retries it.
		return nil, fmt.Errorf("upsert customer %s: %w", d.ID, err)
	}
	return handlers.EncodeResult(Result{Customer: d.ID, Applied: tag.RowsAffected() == 1})
}
