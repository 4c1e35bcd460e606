package envelope

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inboxhq/inbox/internal/pg"
)

// ResolveAudit is what every envelope_resolution row of a resolve (or
// un-resolve) run records besides the envelope: who asked, why, the
// selection as the command gave it (JSON), and the run's batch id (a UUID).
type ResolveAudit struct {
	Actor   string
	Reason  string
	Filter  []byte
	BatchID string
}

// Resolve moves, inside tx, up to limit of the envelopes s selects with an
// id above after from failed to resolved (undo: from resolved to failed),
// in id order, and writes an envelope_resolution row for each, in one
// statement; it returns their ids, ascending. s's Status is replaced by the
// status moved from. Nothing else of an envelope changes: not its body,
// its result, its attempts or its ledger postings. Rows are locked in id
// order, so concurrent runs serialize rather than deadlock, and a row
// another transaction changed first (a replay made it pending) is skipped.
func Resolve(ctx context.Context, tx pgx.Tx, s Selection, after int64, limit int, undo bool, audit ResolveAudit) ([]int64, error) {
	from, to, action := StatusFailed, StatusResolved, "resolve"
	if undo {
		from, to, action = StatusResolved, StatusFailed, "unresolve"
	}
	s.Status, s.AfterID = from, after
	var b sqlBuilder
	s.appendTo(&b)
	q := `
		WITH c AS (
			SELECT id FROM envelope WHERE ` + b.where() + ` ORDER BY id LIMIT ` + b.arg(limit) + ` FOR UPDATE
		), u AS (
			UPDATE envelope e SET status = ` + b.arg(string(to)) + `
			  FROM c WHERE e.id = c.id AND e.status = ` + b.arg(string(from)) + `
			RETURNING e.id
		), a AS (
			INSERT INTO envelope_resolution (envelope_id, action, actor, reason, filter, batch_id)
			SELECT u.id, ` + b.arg(action) + `::text, ` + b.arg(audit.Actor) + `::text, ` + b.arg(audit.Reason) + `::text, ` +
		b.arg(string(audit.Filter)) + `::jsonb, ` + b.arg(audit.BatchID) + `::uuid FROM u
			RETURNING envelope_id
		)
		SELECT envelope_id FROM a ORDER BY envelope_id`
	rows, err := tx.Query(ctx, q, CustomPlan(b.args)...)
	if err != nil {
		return nil, fmt.Errorf("%s envelopes: %w", action, err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return nil, fmt.Errorf("%s envelopes: %w", action, err)
	}
	return ids, nil
}

// Resolution is one envelope_resolution row.
type Resolution struct {
	ID      int64           `json:"id"`
	Action  string          `json:"action"` // resolve or unresolve
	Actor   string          `json:"actor"`
	Reason  string          `json:"reason"`
	Filter  json.RawMessage `json:"filter"`
	BatchID string          `json:"batch_id"`
	At      time.Time       `json:"at"`
}

// Resolutions returns envelope id's resolutions and un-resolutions, oldest
// first (empty, not nil, when none).
func Resolutions(ctx context.Context, q pg.Querier, id int64) ([]Resolution, error) {
	rows, err := q.Query(ctx, `
		SELECT id, action, actor, reason, filter, batch_id::text, at
		  FROM envelope_resolution WHERE envelope_id = $1 ORDER BY id`, id)
	if err != nil {
		return nil, fmt.Errorf("read resolutions: %w", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowToStructByPos[Resolution])
	if err != nil {
		return nil, fmt.Errorf("read resolutions: %w", err)
	}
	if out == nil {
		out = []Resolution{}
	}
	return out, nil
}
