// Package riverjob holds the worker's one write to River's table outside
// River's API, so that a River upgrade that changes what it relies on breaks
// here, in this package's test, and nowhere else.
//
// The write: deleting a batch's running jobs in the batch's transaction, in
// one statement, once their envelopes are final. River's API would complete
// them (river.JobCompleteTx, one statement per job; the many-job form is
// reachable only through River's internal driver executor), which rewrites
// each job row with its five indexes, and River's cleaner deletes the row an
// hour later (--completed-job-retention): two more writes of a row whose
// every fact the envelope and its envelope_attempt row already record. The
// delete is one write, and the cleaner finds nothing of it to clean.
//
// What River does after: Work returns nil, River's completer asks to set
// the job completed if it is still running (JobSetStateIfRunningMany), finds
// no row, and moves on; no retry, no error. The package's test pins that
// with a real River client.
package riverjob

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/inboxhq/inbox/internal/pg"
)

// deleteRunning compares the state as text, which no index serves, so the
// primary key is the one index its plan can use. With the state usable, a
// plan made while river_job is small walks every 'running' entry of River's
// fetch index: after a peak, every dead version of every job that ran. A
// backlog left by a peak then cost 6.7 ms and 2,046 buffers a call, against
// 0.7 ms and 287 for one stored with no worker running (docs/benchmarks.md,
// "Item 2 on a faster sitting").
//
// It is also planned at each call (pg.PlanEachCall), as the worker's other
// statements on a batch's ids are: a plan cached while river_job was empty
// and vacuumed (as it is whenever the worker is idle, the jobs deleted) is a
// sequential scan of river_job, kept until the next VACUUM or ANALYZE of it.
const deleteRunning = `DELETE FROM river_job WHERE id = ANY($1) AND state::text = 'running' RETURNING id`

// DeleteRunning deletes, in tx and in one statement, each of the jobs ids
// that is running, and returns the ids it deleted; a job in any other state
// (or none) is left as it is and absent from the answer. The caller holds
// the rows locked (the worker's fence), so a job it saw running is deleted.
func DeleteRunning(ctx context.Context, tx pgx.Tx, ids []int64) (map[int64]bool, error) {
	out := make(map[int64]bool, len(ids))
	if len(ids) == 0 {
		return out, nil
	}
	rows, err := tx.Query(ctx, deleteRunning, pg.PlanEachCall, ids)
	if err != nil {
		return nil, fmt.Errorf("delete %d finished jobs: %w", len(ids), err)
	}
	var id int64
	if _, err := pgx.ForEachRow(rows, []any{&id}, func() error {
		out[id] = true
		return nil
	}); err != nil {
		return nil, fmt.Errorf("delete %d finished jobs: %w", len(ids), err)
	}
	return out, nil
}
