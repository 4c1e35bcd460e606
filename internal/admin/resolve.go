package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inboxhq/inbox/internal/envelope"
)

// ResolveRequest says which failed envelopes to resolve (or, with Undo,
// which resolved ones to make failed again), who asks, and why.
type ResolveRequest struct {
	// Filter selects them; its Status must be empty or the one moved from
	// (failed, or resolved with Undo): a resolve touches nothing else.
	Filter Filter
	// Actor and Reason are required; both are stored in envelope_resolution.
	Actor  string
	Reason string
	Undo   bool
	// Limit caps how many envelopes change; 0 means no cap.
	Limit int
	// DryRun counts and samples what would change, and changes nothing.
	DryRun bool
}

// ResolveResult sums up a resolve run. On an error it holds what committed
// before the error.
type ResolveResult struct {
	// BatchID is shared by the run's envelope_resolution rows.
	BatchID string `json:"batch_id,omitempty"`
	Action  string `json:"action"`
	// Matched is how many envelopes of the moved-from status the filter
	// selected at the start.
	Matched int `json:"matched"`
	// Changed is how many changed status (a dry run: would change).
	Changed int     `json:"changed"`
	IDs     []int64 `json:"ids"` // the first MaxIDs changed
	// Sample is the first SampleSize matches of a dry run, and MaxID the
	// highest: Filter.MaxID set to it (and Limit to Changed) makes a run
	// take what the dry run saw, and nothing stored since.
	Sample []Summary `json:"sample,omitempty"`
	MaxID  int64     `json:"max_id,omitempty"`
	// At is the database's clock when the run (or dry run) began: what its
	// relative times (--since 24h) were resolved against.
	At           time.Time     `json:"at"`
	LimitReached bool          `json:"limit_reached"`
	DryRun       bool          `json:"dry_run"`
	Duration     time.Duration `json:"-"`
	DurationMS   float64       `json:"duration_ms"`
}

// resolveBatch is how many envelopes one resolve transaction changes.
const resolveBatch = 1000

// from returns the status a request moves envelopes from, and its action.
func (r ResolveRequest) from() (envelope.Status, string) {
	if r.Undo {
		return envelope.StatusResolved, "unresolve"
	}
	return envelope.StatusFailed, "resolve"
}

// Validate checks r before anything is read or written.
func (r ResolveRequest) Validate() error {
	if err := r.Filter.Validate(); err != nil {
		return err
	}
	if !r.Filter.NarrowsBeyondStatus() {
		return errors.New("select envelopes by id or with a filter besides the status (a source, cause, event type or time): resolving every failed envelope at once is not allowed")
	}
	from, action := r.from()
	if r.Filter.Status != "" && r.Filter.Status != from {
		return fmt.Errorf("status %q: %s applies to %s envelopes only", r.Filter.Status, action, from)
	}
	if r.Limit < 0 {
		return fmt.Errorf("limit %d: must not be negative", r.Limit)
	}
	if r.DryRun {
		return nil
	}
	return validateAudit(r.Actor, r.Reason, "changed")
}

// Resolve closes the failed envelopes req.Filter selects: each becomes
// resolved, with an envelope_resolution row (who, why, when, the
// selection, the run's batch id), in id order, in transactions of up to
// 1,000 envelopes. With req.Undo it makes resolved ones failed again. It
// never changes a body, a result, an attempt or a ledger posting: a
// resolved envelope is a failure an operator has accounted for, not a
// success. A resolved envelope leaves the failed counts (worker stats,
// inbox_envelopes, the console) and is final for retention. Unknown ids
// return a *NotFoundError before anything changes; ids of envelopes in
// another status are left alone (counted out of Matched).
func Resolve(ctx context.Context, pool *pgxpool.Pool, req ResolveRequest) (ResolveResult, error) {
	start := time.Now()
	from, action := req.from()
	res := ResolveResult{Action: action, DryRun: req.DryRun, IDs: []int64{}}
	finish := func(err error) (ResolveResult, error) {
		res.Duration = time.Since(start)
		res.DurationMS = float64(res.Duration.Microseconds()) / 1000
		return res, err
	}
	if err := req.Validate(); err != nil {
		return res, err
	}
	f := req.Filter
	f.IDs = dedupe(f.IDs)
	f.Status = from
	clock, err := envelope.ReadClock(ctx, pool)
	if err != nil {
		return res, fmt.Errorf("start %s: %w", action, err)
	}
	res.At = clock.Now
	if len(f.IDs) > 0 {
		missing, err := envelope.Missing(ctx, pool, f.IDs)
		if err != nil {
			return res, err
		}
		if len(missing) > 0 {
			return res, &NotFoundError{IDs: missing}
		}
	}
	sel := f.selection(clock)
	byStatus, maxID, err := envelope.CountByStatus(ctx, pool, sel)
	if err != nil {
		return res, err
	}
	res.Matched, res.MaxID = byStatus[from], maxID
	if req.DryRun {
		res.Changed = res.Matched
		if req.Limit > 0 && req.Limit < res.Changed {
			res.Changed, res.LimitReached = req.Limit, true
		}
		res.Sample, err = envelope.Summaries(ctx, pool, sel, SampleSize, true)
		return finish(err)
	}
	if err := pool.QueryRow(ctx, `SELECT gen_random_uuid()::text`).Scan(&res.BatchID); err != nil {
		return finish(fmt.Errorf("start %s: %w", action, err))
	}
	filterJSON, err := json.Marshal(req.Filter.record(clock.Now, req.Limit))
	if err != nil {
		return finish(fmt.Errorf("encode filter: %w", err))
	}
	audit := envelope.ResolveAudit{Actor: req.Actor, Reason: req.Reason, Filter: filterJSON, BatchID: res.BatchID}
	var after int64
	for {
		size := resolveBatch
		if req.Limit > 0 {
			if req.Limit-res.Changed <= 0 {
				beyond := sel
				beyond.AfterID = after
				more, err := envelope.Exists(ctx, pool, beyond)
				if err != nil {
					return finish(err)
				}
				res.LimitReached = more
				return finish(nil)
			}
			size = min(size, req.Limit-res.Changed)
		}
		var ids []int64
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			var err error
			ids, err = envelope.Resolve(ctx, tx, sel, after, size, req.Undo, audit)
			return err
		})
		if err != nil {
			return finish(fmt.Errorf("%s after %d changed: %w", action, res.Changed, err))
		}
		if len(ids) == 0 {
			return finish(nil)
		}
		res.Changed += len(ids)
		for _, id := range ids {
			if len(res.IDs) < MaxIDs {
				res.IDs = append(res.IDs, id)
			}
		}
		after = ids[len(ids)-1]
	}
}
