// Package riverjob holds the worker's one call to River outside River's
// stable API, so that a River upgrade that changes it breaks here, in this
// package's test, and nowhere else.
//
// The call: completing many running jobs in the caller's transaction, in
// one statement. River's stable API completes one job per call
// (river.JobCompleteTx: one statement each, 50 per batch at the worker's
// defaults); the statement behind it, JobSetStateIfRunningMany, takes many,
// but River reaches it only through its driver's executor, which River marks
// as internal and outside semantic versioning. The worker completes a
// batch's jobs in the batch's transaction (a final envelope never has a live
// job), so it needs the many-job form.
package riverjob

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river/riverdriver"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"
)

// CompleteRunning sets each of the jobs ids to completed (finalized at
// now), in tx and in one statement, if it is running; a job in any other
// state is left as it is. It returns every job's state after the
// statement, by id (a job that does not exist is absent).
func CompleteRunning(ctx context.Context, tx pgx.Tx, ids []int64, now time.Time) (map[int64]rivertype.JobState, error) {
	if len(ids) == 0 {
		return map[int64]rivertype.JobState{}, nil
	}
	var p riverdriver.JobSetStateIfRunningManyParams
	for _, id := range ids {
		c := riverdriver.JobSetStateCompleted(id, now, nil)
		p.ID = append(p.ID, c.ID)
		p.Attempt = append(p.Attempt, c.Attempt)
		p.ErrData = append(p.ErrData, c.ErrData)
		p.FinalizedAt = append(p.FinalizedAt, c.FinalizedAt)
		p.MetadataDoMerge = append(p.MetadataDoMerge, c.MetadataDoMerge)
		p.MetadataUpdates = append(p.MetadataUpdates, c.MetadataUpdates)
		p.ScheduledAt = append(p.ScheduledAt, c.ScheduledAt)
		p.State = append(p.State, c.State)
	}
	rows, err := riverpgxv5.New(nil).UnwrapExecutor(tx).JobSetStateIfRunningMany(ctx, &p)
	if err != nil {
		return nil, fmt.Errorf("complete %d jobs: %w", len(ids), err)
	}
	out := make(map[int64]rivertype.JobState, len(rows))
	for _, r := range rows {
		out[r.ID] = r.State
	}
	return out, nil
}
