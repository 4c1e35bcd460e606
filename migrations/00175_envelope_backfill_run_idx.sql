-- A partial index on envelope.backfill_run_id: what a run stored (and the foreign key's check
-- when a backfill_run row is deleted) is found without scanning envelope. Only backfilled
-- envelopes have the column set, so the index stays small. Built concurrently, outside a
-- transaction, as 00160 does its checks, so ingest is never blocked behind the build.

-- +goose NO TRANSACTION
-- +goose Up
-- A build that failed midway leaves an invalid index behind: dropped first, then built anew.
DROP INDEX CONCURRENTLY IF EXISTS envelope_backfill_run_id_idx;
CREATE INDEX CONCURRENTLY envelope_backfill_run_id_idx
    ON envelope (backfill_run_id) WHERE backfill_run_id IS NOT NULL;

-- +goose Down
DROP INDEX CONCURRENTLY IF EXISTS envelope_backfill_run_id_idx;
