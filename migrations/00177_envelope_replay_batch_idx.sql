-- Replay runs by batch id (issue 12): the console's Replays page sums each recent run's rows, and a
-- run's page counts what became of its envelopes (envelope.RecentReplayRuns, envelope.ReplayOutcome),
-- both by envelope_replay.batch_id, which had no index: a run of 10,000 envelopes was a scan of every
-- replay ever recorded. Partial: rows without a batch id (from before batch ids) are never looked up
-- by it. CONCURRENTLY: a replay may be writing, so the build must not block it.

-- +goose NO TRANSACTION
-- +goose Up
CREATE INDEX CONCURRENTLY IF NOT EXISTS envelope_replay_batch_id_idx
    ON envelope_replay (batch_id) WHERE batch_id IS NOT NULL;

-- +goose Down
DROP INDEX CONCURRENTLY IF EXISTS envelope_replay_batch_id_idx;
