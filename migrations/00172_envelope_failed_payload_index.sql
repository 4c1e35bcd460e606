-- Search inside failed envelopes' bodies (issue 12): `worker envelopes list --status failed
-- --field data.merchant_id=m_1` is `status = 'failed' AND payload @> '{"data":{"merchant_id":"m_1"}}'`,
-- served by this GIN index. Partial on failed: an envelope enters it only when the worker fails
-- it, so ingest's insert and the worker's update to done add nothing to it (a full GIN index made
-- a bulk insert of 20,000 2 KB Stripe payloads about three times slower: 0.5 s -> 1.7 s; and as
-- status is indexed, each update of an envelope is a new index entry too). A search over other
-- statuses scans: bound it with --source, --event-type or --since. jsonb_path_ops: smaller and
-- faster than the default opclass, and serves @> only, the one operator the filter uses.
-- CONCURRENTLY: envelope is written all the time, so the build must not block it.

-- +goose NO TRANSACTION
-- +goose Up
CREATE INDEX CONCURRENTLY IF NOT EXISTS envelope_failed_payload_idx
    ON envelope USING gin (payload jsonb_path_ops)
    WHERE status = 'failed';

-- +goose Down
DROP INDEX CONCURRENTLY IF EXISTS envelope_failed_payload_idx;
