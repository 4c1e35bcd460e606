-- Find an envelope's processing jobs by envelope id (replay's live-job check,
-- reconcile, audits) without scanning river_job. CONCURRENTLY: river_job is
-- written all the time, so the build must not block it.

-- +goose NO TRANSACTION
-- +goose Up
CREATE INDEX CONCURRENTLY IF NOT EXISTS river_job_envelope_id_idx
    ON river_job (((args->>'envelope_id')::bigint))
    WHERE kind = 'process_envelope';

-- +goose Down
DROP INDEX CONCURRENTLY IF EXISTS river_job_envelope_id_idx;
