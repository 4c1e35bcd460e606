-- Backfill runs resumed safely (issue 14b):
--   accounts   the Stripe accounts the run lists, in order ('' for the key's own): a resume with
--              another list would skip or mislist accounts, so it is refused.
--   heartbeat_at  set by the run's writer at its start and after every page: a resume claims the
--              row only when it is not running, or its heartbeat is stale (its writer died), so
--              one run never has two writers.
--   writer     a token of the process writing the run: every write of the run's progress is
--              conditional on it, so a writer whose row was claimed from it stops.
--   resumed_by / resumed_at  who last resumed it.
-- Nullable columns with no default: a catalogue change only.

-- +goose Up
ALTER TABLE backfill_run ADD COLUMN IF NOT EXISTS accounts text[],
    ADD COLUMN IF NOT EXISTS heartbeat_at timestamptz,
    ADD COLUMN IF NOT EXISTS writer text,
    ADD COLUMN IF NOT EXISTS resumed_by text,
    ADD COLUMN IF NOT EXISTS resumed_at timestamptz;

-- +goose Down
ALTER TABLE backfill_run DROP COLUMN IF EXISTS resumed_at,
    DROP COLUMN IF EXISTS resumed_by,
    DROP COLUMN IF EXISTS writer,
    DROP COLUMN IF EXISTS heartbeat_at,
    DROP COLUMN IF EXISTS accounts;
