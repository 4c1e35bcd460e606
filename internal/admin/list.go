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
type Summary = envelope.Summary

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
	// CountUpTo, when positive, also counts the envelopes the filter selects
	// (every page's, not only this one), in the same snapshot, stopping at
	// CountUpTo: a bounded cost however many match.
	CountUpTo int
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
	if r.CountUpTo < 0 {
		return fmt.Errorf("count-up-to %d must not be negative", r.CountUpTo)
	}
	return nil
}

// ListResult is one page.
type ListResult struct {
	Envelopes []Summary `json:"envelopes"`
	// NextBeforeID is the cursor of the next page (ListRequest.BeforeID), or
	// nil on the last page.
	NextBeforeID *int64 `json:"next_before_id"`
	// Matched counts the envelopes the filter selects when
	// ListRequest.CountUpTo asked for it, at most CountUpTo; MatchedMore
	// says there are more.
	Matched     int  `json:"matched,omitempty"`
	MatchedMore bool `json:"matched_more,omitempty"`
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
		sel := req.Filter.selection(now)
		if req.CountUpTo > 0 {
			n, err := envelope.CountUpTo(ctx, tx, sel, req.CountUpTo+1)
			if err != nil {
				return err
			}
			res.Matched, res.MatchedMore = min(n, req.CountUpTo), n > req.CountUpTo
		}
		sel.BeforeID = req.BeforeID
		var err error
		res.Envelopes, err = envelope.Summaries(ctx, tx, sel, req.Limit+1, false)
		return err
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
