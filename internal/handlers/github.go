package handlers

import (
	"context"
	"encoding/json"
)

// githubRecord records any GitHub event as done, with no ledger effect: the
// envelope itself is the record.
func githubRecord(_ context.Context, run Run) (json.RawMessage, error) {
	env := run.Envelope
	return EncodeResult(RecordResult{Recorded: true, Event: env.EventType})
}
