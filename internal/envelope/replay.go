package envelope

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// ReplayCandidate is an envelope a replay batch locked.
type ReplayCandidate struct {
	ID     int64
	Status Status
	Source string
	// TraceContext is its ingest request's traceparent, "" when none.
	TraceContext string
	// Live is true when it has a processing job still waiting or running:
	// a replay leaves it alone.
	Live bool
}

// LockForReplay locks (FOR UPDATE, in id order, so concurrent replays
// serialize instead of deadlocking) the first limit envelopes s selects,
// inside tx, and tells which of them have a live processing job (LiveJobs).
func LockForReplay(ctx context.Context, tx pgx.Tx, s Selection, limit int) ([]ReplayCandidate, error) {
	var b sqlBuilder
	s.appendTo(&b)
	sel := `SELECT id, status, source, coalesce(trace_context, '') FROM envelope WHERE ` + b.where() + ` ORDER BY id LIMIT ` + b.arg(limit) + ` FOR UPDATE`
	rows, err := tx.Query(ctx, sel, CustomPlan(b.args)...)
	if err != nil {
		return nil, fmt.Errorf("lock envelopes: %w", err)
	}
	list, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (ReplayCandidate, error) {
		var c ReplayCandidate
		err := r.Scan(&c.ID, &c.Status, &c.Source, &c.TraceContext)
		return c, err
	})
	if err != nil {
		return nil, fmt.Errorf("lock envelopes: %w", err)
	}
	if len(list) == 0 {
		return list, nil
	}
	ids := make([]int64, len(list))
	for i, c := range list {
		ids[i] = c.ID
	}
	live, err := LiveJobs(ctx, tx, ids)
	if err != nil {
		return nil, err
	}
	for i := range list {
		list[i].Live = live[list[i].ID]
	}
	return list, nil
}

// Replayed is one envelope a replay gave a new job.
type Replayed struct {
	EnvelopeID  int64
	PriorStatus Status
	JobID       int64
}

// ReplayAudit is what every envelope_replay row of a replay run records
// besides the envelope: who asked, why, the selection as the command gave
// it (JSON), and the run's batch id (a UUID).
type ReplayAudit struct {
	Actor   string
	Reason  string
	Filter  []byte
	BatchID string
}

// RecordReplays resets the replayed envelopes to pending (processed_at
// NULL; result and last_error stay until they are processed again) and
// writes an envelope_replay row for each, inside tx, in one round trip.
// The caller has locked them (LockForReplay) and inserted their jobs.
func RecordReplays(ctx context.Context, tx pgx.Tx, replayed []Replayed, audit ReplayAudit) error {
	if len(replayed) == 0 {
		return nil
	}
	ids, jobIDs := make([]int64, len(replayed)), make([]int64, len(replayed))
	priors := make([]string, len(replayed))
	for i, r := range replayed {
		ids[i], jobIDs[i], priors[i] = r.EnvelopeID, r.JobID, string(r.PriorStatus)
	}
	batch := &pgx.Batch{}
	batch.Queue(`UPDATE envelope SET status = 'pending', processed_at = NULL WHERE id = ANY($1::bigint[])`, ids)
	batch.Queue(`
		INSERT INTO envelope_replay (envelope_id, actor, reason, filter, batch_id, prior_status, job_id)
		SELECT r.envelope_id, $4, $5, $6, $7, r.prior_status, r.job_id
		  FROM unnest($1::bigint[], $2::text[], $3::bigint[]) AS r(envelope_id, prior_status, job_id)`,
		ids, priors, jobIDs, audit.Actor, audit.Reason, audit.Filter, audit.BatchID)
	if err := tx.SendBatch(ctx, batch).Close(); err != nil {
		return fmt.Errorf("reset envelopes and record replays: %w", err)
	}
	return nil
}
