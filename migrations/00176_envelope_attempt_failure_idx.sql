-- The console's failures page (issue 12) counts failed and retried attempts per cause over a window
-- (envelope.Failures: finished_at >= now() - 24h, say). Without an index that is a scan of every
-- attempt ever recorded, which grows with the inbox. Partial on the failing outcomes: done and
-- ignored attempts (nearly all of them) add nothing to it, so the worker's insert of a successful
-- attempt costs what it did. cause is included so the count reads the index only.
-- CONCURRENTLY: envelope_attempt is written all the time, so the build must not block it.

-- +goose NO TRANSACTION
-- +goose Up
CREATE INDEX CONCURRENTLY IF NOT EXISTS envelope_attempt_failure_idx
    ON envelope_attempt (finished_at) INCLUDE (cause, envelope_id)
    WHERE outcome IN ('failed', 'retry');

-- +goose Down
DROP INDEX CONCURRENTLY IF EXISTS envelope_attempt_failure_idx;
