package envelope

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inboxhq/inbox/internal/pg"
)

// Orphan is a pending envelope without a live processing job.
type Orphan struct {
	ID     int64
	Source string
	// LastJob is its newest processing job (cancelled or discarded; a
	// finished envelope's job is deleted, not completed), nil when it never
	// had one or it was deleted.
	LastJob *Job
	// Now is the database's clock when the row was locked.
	Now time.Time
}

// Orphans locks, oldest received first, up to limit pending envelopes
// received more than grace ago that have no processing job still waiting or running
// (LiveJobStates), each with its newest job. Rows another transaction holds
// are skipped (SKIP LOCKED), so concurrent callers share the work; the
// locks last until tx ends. Receipt order walks each partition's
// (status, received_at) index, so the cost follows the pending envelopes,
// not the envelopes kept (in id order it walked every partition's primary
// key: 21 s at 10 M envelopes with 50 k orphans). It is planned at each call
// (pg.PlanEachCall): a generic plan cannot use river_job's partial index on
// the envelope id (WHERE kind = 'process_envelope') for a kind given as a
// parameter, and looked each candidate's jobs up among every job of the kind,
// whose count is the backlog's.
func Orphans(ctx context.Context, tx pgx.Tx, grace time.Duration, limit int) ([]Orphan, error) {
	rows, err := tx.Query(ctx, `
		SELECT e.id, e.source, l.id, l.state::text, clock_timestamp()
		  FROM envelope e
		  LEFT JOIN LATERAL (
		       SELECT j.id, j.state FROM river_job j
		        WHERE j.kind = $3 AND `+jobEnvelopeID+` = e.id
		        ORDER BY j.id DESC LIMIT 1) l ON TRUE
		 WHERE e.status = 'pending' AND e.received_at < now() - make_interval(secs => $1)
		   AND NOT EXISTS (
		       SELECT 1 FROM river_job j
		        WHERE j.kind = $3 AND `+jobEnvelopeID+` = e.id
		          AND j.state = ANY($2::river_job_state[]))
		 ORDER BY e.received_at, e.id
		 LIMIT $4
		   FOR UPDATE OF e SKIP LOCKED`, pg.PlanEachCall, grace.Seconds(), LiveJobStates(), ProcessArgs{}.Kind(), limit)
	if err != nil {
		return nil, fmt.Errorf("find orphaned envelopes: %w", err)
	}
	list, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Orphan, error) {
		var o Orphan
		var jobID *int64
		var state *string
		if err := r.Scan(&o.ID, &o.Source, &jobID, &state, &o.Now); err != nil {
			return o, err
		}
		if jobID != nil {
			o.LastJob = &Job{EnvelopeID: o.ID, ID: *jobID, State: *state}
		}
		return o, nil
	})
	if err != nil {
		return nil, fmt.Errorf("find orphaned envelopes: %w", err)
	}
	return list, nil
}
