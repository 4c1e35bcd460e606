-- Grants for backfill (00160), in the style of 00110_roles.sql.
--   ingest reads a taken envelope's origin: a backfilled copy of an event (rendered by the
--     provider's API, not its webhook) and the webhook delivery of the same event are duplicates,
--     not a conflict (internal/envelope/store.go).
--   worker (the periodic reconcile) and admin (`worker backfill`) store envelopes through the
--     same insert as ingest, and write the backfill_run audit row.

-- +goose Up
GRANT SELECT (origin) ON envelope TO inbox_ingest;
GRANT INSERT ON envelope, envelope_duplicate, envelope_conflict TO inbox_worker, inbox_admin;
GRANT USAGE ON SEQUENCE envelope_id_seq, envelope_duplicate_id_seq, envelope_conflict_id_seq TO inbox_worker, inbox_admin;
GRANT SELECT, INSERT, UPDATE ON backfill_run TO inbox_worker, inbox_admin;
GRANT USAGE ON SEQUENCE backfill_run_id_seq TO inbox_worker, inbox_admin;

-- +goose Down
REVOKE ALL ON backfill_run FROM inbox_worker, inbox_admin;
REVOKE ALL ON SEQUENCE backfill_run_id_seq FROM inbox_worker, inbox_admin;
REVOKE USAGE ON SEQUENCE envelope_id_seq, envelope_duplicate_id_seq, envelope_conflict_id_seq FROM inbox_worker, inbox_admin;
REVOKE INSERT ON envelope_duplicate, envelope_conflict FROM inbox_worker, inbox_admin;
REVOKE INSERT ON envelope FROM inbox_worker, inbox_admin;
REVOKE SELECT (origin) ON envelope FROM inbox_ingest;
