package admin

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inboxhq/inbox/internal/envelope"
)

// Summary is one envelope in a listing: everything but its body, payload,
// headers and result.
type Summary struct {
	ID          int64           `json:"id"`
	Source      string          `json:"source"`
	Provider    string          `json:"provider"`
	DeliveryID  string          `json:"delivery_id"`
	EventType   string          `json:"event_type"`
	Status      envelope.Status `json:"status"`
	ReceivedAt  time.Time       `json:"received_at"`
	ProcessedAt *time.Time      `json:"processed_at"`
	Attempts    int             `json:"attempts"`
	LastError   *string         `json:"last_error"`
	// LastCause is LastError's code (labels.Cause), nil when none.
	LastCause  *string `json:"last_cause"`
	Duplicates int     `json:"duplicates"`
	BodySize   int     `json:"body_size"`
	// Reason is why an ignored envelope was stored but not routed (its
	// result's "reason": no handler for its event type, or it has none);
	// nil for other statuses.
	Reason *string `json:"reason"`
}

const summaryColumns = `id, source, provider, delivery_id, event_type, status, received_at,
	processed_at, attempts, last_error, last_cause,
	(SELECT count(*) FROM envelope_duplicate d WHERE d.envelope_id = envelope.id), body_size,
	CASE WHEN status = 'ignored' THEN result->>'reason' END`

func collectSummaries(rows pgx.Rows) ([]Summary, error) {
	out := []Summary{}
	defer rows.Close()
	for rows.Next() {
		var s Summary
		if err := rows.Scan(&s.ID, &s.Source, &s.Provider, &s.DeliveryID, &s.EventType, &s.Status, &s.ReceivedAt,
			&s.ProcessedAt, &s.Attempts, &s.LastError, &s.LastCause, &s.Duplicates, &s.BodySize, &s.Reason); err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, rows.Err()
}

// DefaultListLimit is List's page size when none is given.
const DefaultListLimit = 50

// MaxListLimit caps one page of List.
const MaxListLimit = 10000

// ListRequest asks for one page of envelopes, newest (highest id) first.
type ListRequest struct {
	Filter Filter
	// Limit is the page size: DefaultListLimit when 0, at most MaxListLimit.
	Limit int
	// BeforeID is the cursor: only envelopes with a lower id. 0 starts at the
	// newest.
	BeforeID int64
}

// Validate checks r before anything is read: its filter, a limit of 0
// (the default) to MaxListLimit, a cursor that is not negative.
func (r ListRequest) Validate() error {
	if err := r.Filter.Validate(); err != nil {
		return err
	}
	if r.Limit < 0 || r.Limit > MaxListLimit {
		return fmt.Errorf("limit %d: want 1 to %d", r.Limit, MaxListLimit)
	}
	if r.BeforeID < 0 {
		return errors.New("before-id must be positive")
	}
	return nil
}

// ListResult is one page.
type ListResult struct {
	Envelopes []Summary `json:"envelopes"`
	// NextBeforeID is the cursor of the next page (ListRequest.BeforeID), or
	// nil on the last page.
	NextBeforeID *int64 `json:"next_before_id"`
}

// List returns one page of the envelopes f selects, newest first, in a
// read-only transaction: it changes nothing. Pages are stable under new
// arrivals: the cursor is an id, and ids only grow.
func List(ctx context.Context, pool *pgxpool.Pool, req ListRequest) (ListResult, error) {
	if err := req.Validate(); err != nil {
		return ListResult{}, err
	}
	if req.Limit == 0 {
		req.Limit = DefaultListLimit
	}
	var res ListResult
	err := readOnly(ctx, pool, func(tx pgx.Tx, now time.Time) error {
		var q sqlBuilder
		req.Filter.appendTo(&q, now)
		if req.BeforeID > 0 {
			q.cond("id < " + q.arg(req.BeforeID))
		}
		sel := `SELECT ` + summaryColumns + ` FROM envelope WHERE ` + q.where() + ` ORDER BY id DESC LIMIT ` + q.arg(req.Limit+1)
		rows, err := tx.Query(ctx, sel, customPlan(q.args)...)
		if err != nil {
			return fmt.Errorf("list envelopes: %w", err)
		}
		res.Envelopes, err = collectSummaries(rows)
		if err != nil {
			return fmt.Errorf("list envelopes: %w", err)
		}
		return nil
	})
	if err != nil {
		return ListResult{}, err
	}
	if len(res.Envelopes) > req.Limit {
		res.Envelopes = res.Envelopes[:req.Limit]
		next := res.Envelopes[req.Limit-1].ID
		res.NextBeforeID = &next
	}
	return res, nil
}

// readOnly runs fn in a read-only REPEATABLE READ transaction, so its
// queries see one snapshot and cannot write, and passes the database's now().
func readOnly(ctx context.Context, pool *pgxpool.Pool, fn func(tx pgx.Tx, now time.Time) error) error {
	return pgx.BeginTxFunc(ctx, pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		var now time.Time
		if err := tx.QueryRow(ctx, `SELECT now()`).Scan(&now); err != nil {
			return fmt.Errorf("read clock: %w", err)
		}
		return fn(tx, now)
	})
}

// missingIDs returns the ids that are not envelopes, in order.
func missingIDs(ctx context.Context, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, ids []int64) ([]int64, error) {
	var missing []int64
	err := q.QueryRow(ctx, `
		SELECT coalesce(array_agg(i ORDER BY i), '{}')
		  FROM unnest($1::bigint[]) AS i
		 WHERE NOT EXISTS (SELECT 1 FROM envelope e WHERE e.id = i)`, ids).Scan(&missing)
	if err != nil {
		return nil, fmt.Errorf("look up envelope ids: %w", err)
	}
	return missing, nil
}
