package handlers

import (
	"context"
	"encoding/json"

	"github.com/jackc/pgx/v5"

	"github.com/inboxhq/inbox/internal/envelope"
)

// githubRecord records any GitHub event as done, with no ledger effect: the
// envelope itself is the record.
func githubRecord(_ context.Context, _ pgx.Tx, env *envelope.Envelope) (json.RawMessage, error) {
	return EncodeResult(RecordResult{Recorded: true, Event: env.EventType})
}
