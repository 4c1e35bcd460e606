-- River's two GIN indexes on river_job (args, metadata) go (issue 25, the CPU and WAL budget per envelope).
--
-- Every processing job's row is written four times (insert, fetch, completion, cleanup), and the fetch and the
-- completion are not HOT updates (state is indexed): each of the first three writes adds entries to every
-- index of the table, these two included. Measured on this project's machine (the same 20,000 jobs inserted,
-- fetched and completed 50 at a time as River does, once with and once without them): 3,076 bytes of WAL per
-- job with them, 1,918 without (-38 %); a completed row takes 356 bytes with them, 265 without. Nothing reads
-- them: this project finds an envelope's jobs through river_job_envelope_id_idx (migration 00106), River
-- queries args only in its UI's job search and metadata only when asked to filter by it (both then scan the
-- table, which the worker keeps to its last hour of completed jobs: worker run --completed-job-retention), and
-- River's reindexer is told to skip them (worker.NewClient). A River upgrade whose migration touches either
-- index would need it recreated first (the Down below); the River migrations up to 008 do not.
--
-- NO TRANSACTION: DROP INDEX CONCURRENTLY does not block River's writers; each statement is safe to run again.

-- +goose NO TRANSACTION
-- +goose Up
DROP INDEX CONCURRENTLY IF EXISTS river_job_args_index;
DROP INDEX CONCURRENTLY IF EXISTS river_job_metadata_index;

-- +goose Down
CREATE INDEX CONCURRENTLY IF NOT EXISTS river_job_args_index ON river_job USING GIN (args);
CREATE INDEX CONCURRENTLY IF NOT EXISTS river_job_metadata_index ON river_job USING GIN (metadata);
