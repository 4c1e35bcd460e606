package envelope

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"

	"github.com/inboxhq/inbox/internal/pg"
)

// ProcessArgs is the River job that processes one envelope. Its kind is
// stored in river_job: never rename it.
type ProcessArgs struct {
	EnvelopeID int64 `json:"envelope_id" river:"unique"`
	// Source is the envelope's source, so per-source retry and throttle
	// settings apply without loading the envelope. Not part of uniqueness.
	Source string `json:"source,omitempty"`
}

// Kind implements river.JobArgs.
func (ProcessArgs) Kind() string { return "process_envelope" }

// InsertOpts makes the job unique per envelope among jobs that are still
// waiting or running, so an envelope never has two live jobs (a replay of an
// envelope whose job is still waiting inserts nothing). Finished jobs do not
// count, so a finished envelope can be replayed.
func (ProcessArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{
		UniqueOpts: river.UniqueOpts{ByArgs: true, ByState: WaitingOrRunning()},
	}
}

// ProcessJob is the insert of envelope envelopeID's processing job: every
// path that enqueues one uses it (Store.Insert for ingest and backfill, the
// admin replay, the worker's reconcile). maxAttempts is River's own limit
// for the job, 0 for River's default (25): the source's max_attempts where
// the path knows it (Store.Insert, from NewDelivery.MaxAttempts), else 0.
// It is only River's backstop: whether an attempt exhausts the envelope is
// decided by the worker alone, with the source's max_attempts of its own
// configuration against the job's (see the package doc).
func ProcessJob(envelopeID int64, source string, maxAttempts int) river.InsertManyParams {
	return river.InsertManyParams{
		Args:       ProcessArgs{EnvelopeID: envelopeID, Source: source},
		InsertOpts: &river.InsertOpts{MaxAttempts: maxAttempts},
	}
}

// WaitingOrRunning are the River job states of a job not yet finished: the
// unique states of every job kind here that must not run twice at once
// (processing, purge, backfill reconcile). A new slice each call.
func WaitingOrRunning() []rivertype.JobState {
	return []rivertype.JobState{
		rivertype.JobStateAvailable,
		rivertype.JobStatePending,
		rivertype.JobStateRetryable,
		rivertype.JobStateRunning,
		rivertype.JobStateScheduled,
	}
}

// NewInsertClient returns a River client that only inserts jobs (for ingest
// and the admin commands); it runs no queues.
func NewInsertClient(pool *pgxpool.Pool, logger *slog.Logger) (*river.Client[pgx.Tx], error) {
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{Logger: logger})
	if err != nil {
		return nil, fmt.Errorf("river insert client: %w", err)
	}
	return client, nil
}

// LiveJobStates are the River job states in which a processing job is still
// waiting or running: those of ProcessArgs' unique opts. An envelope has at
// most one job in these states.
func LiveJobStates() []string {
	states := ProcessArgs{}.InsertOpts().UniqueOpts.ByState
	out := make([]string, len(states))
	for i, s := range states {
		out[i] = string(s)
	}
	return out
}

// PressureChannel is the PostgreSQL NOTIFY channel on which ingest says
// that its store queue stands above its pressure target (--pressure-target):
// workers sharing the database slow down (worker.Yield) so that intake
// keeps its latency and processing catches up after.
const PressureChannel = "inbox_ingest_pressure"

// PressureRefusing is the payload of a pressure notification sent while
// ingest refuses deliveries because its store is behind (--shed-after):
// a delivery refused is one the provider must resend, and workers yield
// then even when they are not behind (worker.Yield.MinLag). Besides it
// and PressureSurge, a payload is plain pressure (empty from ingest).
const PressureRefusing = "refusing"

// PressureSurge is the payload of a pressure notification sent while
// more is offered to ingest than a while ago, when it was calm: a step in
// the load (a sale, a provider's backlog arriving at once). Workers then
// yield at once, even when they keep up, rather than once they are
// behind: in the step's first second a worker at full rate costs intake
// the most.
const PressureSurge = "surge"

// StoredSoFar returns how many envelopes have been stored so far: the last
// value of envelope_id_seq, which each envelope's id draws from (0 before
// the first). It only grows (a rolled-back insert, a duplicate that
// conflicted, still draws a value), so two readings tell the rate work
// arrives at (worker.Yield.Arrivals); it is one catalog read, whatever the
// table's size. inbox_worker has USAGE on the sequence, which suffices.
func StoredSoFar(ctx context.Context, q pg.Querier) (int64, error) {
	var n int64
	err := q.QueryRow(ctx, "SELECT coalesce(pg_sequence_last_value('envelope_id_seq'), 0)").Scan(&n)
	return n, err
}
