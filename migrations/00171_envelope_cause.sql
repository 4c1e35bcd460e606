-- Failure causes as data (issue 12): every failed, retried or snoozed attempt records a stable,
-- low-cardinality code next to its message (internal/labels/cause.go lists them), and the
-- envelope keeps its last one, so failures group, filter and replay by cause rather than by a
-- message that carries ids. NULL for done and ignored attempts, and for attempts recorded before
-- this migration. Adding nullable columns without a default rewrites nothing.
-- Grants: the columns are covered by the table-level grants of 00110_roles.sql (the worker writes
-- them, the admin reads them); ingest's column grants on envelope do not include them, as ingest
-- never reads them.

-- +goose Up
ALTER TABLE envelope_attempt ADD COLUMN cause text CHECK (cause ~ '^[a-z0-9_]{1,64}$');
ALTER TABLE envelope ADD COLUMN last_cause text CHECK (last_cause ~ '^[a-z0-9_]{1,64}$');

-- +goose Down
ALTER TABLE envelope DROP COLUMN last_cause;
ALTER TABLE envelope_attempt DROP COLUMN cause;
