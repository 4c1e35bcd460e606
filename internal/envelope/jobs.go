package envelope

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inboxhq/inbox/internal/pg"
)

// The lookups of river_job by envelope id. A processing job names its
// envelope only in its args (ProcessArgs.EnvelopeID), so every statement
// that finds an envelope's jobs uses jobEnvelopeID on a river_job row
// aliased j, restricted to ProcessArgs' kind, and LiveJobStates for "still
// waiting or running": this file, Orphans and the selection counts.

// jobEnvelopeID is the envelope id of river_job row j.
const jobEnvelopeID = `(j.args->>'envelope_id')::bigint`

// Job is a processing job (ProcessArgs) of an envelope.
type Job struct {
	// EnvelopeID is left out of the JSON (admin's envelope detail, which
	// lists one envelope's jobs).
	EnvelopeID  int64      `json:"-"`
	ID          int64      `json:"id"`
	State       string     `json:"state"`
	Attempt     int        `json:"attempt"`
	MaxAttempts int        `json:"max_attempts"`
	CreatedAt   time.Time  `json:"created_at"`
	ScheduledAt time.Time  `json:"scheduled_at"`
	FinalizedAt *time.Time `json:"finalized_at"`
}

// Jobs returns the processing jobs of the envelopes ids, in job id order:
// every one when live is false, only those still waiting or running
// (LiveJobStates) when it is true.
//
// It is a lookup of river_job_envelope_id_idx (migration 00106, an index
// on the envelope id of the kind's rows), filtered by state when live. It is
// planned with its values at each call (pg.PlanEachCall), so the planner
// can match the index's kind predicate and hash a long id list. River's GIN
// indexes on args and metadata are gone (migration 00194): this was their
// only reader.
func Jobs(ctx context.Context, q pg.Querier, ids []int64, live bool) ([]Job, error) {
	sql := `
		SELECT ` + jobEnvelopeID + `, j.id, j.state::text, j.attempt, j.max_attempts, j.created_at, j.scheduled_at, j.finalized_at
		  FROM river_job j
		 WHERE j.kind = $1
		   AND ` + jobEnvelopeID + ` = ANY($2::bigint[])`
	args := []any{pg.PlanEachCall, ProcessArgs{}.Kind(), ids}
	if live {
		sql += `
		   AND j.state = ANY($3::river_job_state[])`
		args = append(args, LiveJobStates())
	}
	rows, err := q.Query(ctx, sql+`
		 ORDER BY j.id`, args...)
	if err != nil {
		return nil, fmt.Errorf("find jobs of %d envelopes: %w", len(ids), err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Job, error) {
		var j Job
		err := r.Scan(&j.EnvelopeID, &j.ID, &j.State, &j.Attempt, &j.MaxAttempts, &j.CreatedAt, &j.ScheduledAt, &j.FinalizedAt)
		return j, err
	})
	if err != nil {
		return nil, fmt.Errorf("find jobs of %d envelopes: %w", len(ids), err)
	}
	return out, nil
}

// LiveJobs returns which of ids have a processing job still waiting or
// running (Jobs with live).
func LiveJobs(ctx context.Context, q pg.Querier, ids []int64) (map[int64]bool, error) {
	jobs, err := Jobs(ctx, q, ids, true)
	if err != nil {
		return nil, err
	}
	live := make(map[int64]bool, len(jobs))
	for _, j := range jobs {
		live[j.EnvelopeID] = true
	}
	return live, nil
}
