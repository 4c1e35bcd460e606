-- Backfill: events recovered from a provider's own log (Stripe's GET /v1/events, GitHub's hook
-- deliveries) rather than delivered to ingest. One backfill_run row per run (the CLI's
-- `worker backfill` and the periodic reconcile alike); each envelope says where it came from.
-- Outside a transaction, with the envelope checks added NOT VALID and validated separately, so
-- ingest is blocked only for the catalogue change, not for a scan (as 00123).

-- +goose NO TRANSACTION
-- +goose Up
CREATE TABLE IF NOT EXISTS backfill_run (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    source      text        NOT NULL,
    provider    text        NOT NULL,
    actor       text        NOT NULL CHECK (actor <> ''),       -- the operator, or 'reconcile' for the periodic job
    dry_run     boolean     NOT NULL DEFAULT false,
    since       timestamptz NOT NULL,                           -- the window: events created at or after since ...
    until       timestamptz NOT NULL,                           -- ... and listed before until (the run's start)
    status      text        NOT NULL DEFAULT 'running'
                CHECK (status IN ('running', 'done', 'failed', 'interrupted')),
    listed      integer     NOT NULL DEFAULT 0,                 -- events (deliveries) the provider listed in the window
    found       integer     NOT NULL DEFAULT 0,                 -- of those, with no envelope: never delivered
    stored      integer     NOT NULL DEFAULT 0,                 -- stored by this run (Stripe) or redelivered on request (GitHub)
    cursor      text,                                           -- the last page's cursor (Stripe: starting_after)
    error       text,
    started_at  timestamptz NOT NULL DEFAULT now(),
    finished_at timestamptz
);
CREATE INDEX IF NOT EXISTS backfill_run_source_started_idx ON backfill_run (source, started_at);

ALTER TABLE envelope ADD COLUMN IF NOT EXISTS origin text NOT NULL DEFAULT 'webhook',
    ADD COLUMN IF NOT EXISTS backfill_run_id bigint;
ALTER TABLE envelope DROP CONSTRAINT IF EXISTS envelope_origin_check,
    ADD CONSTRAINT envelope_origin_check CHECK (origin IN ('webhook', 'backfill')) NOT VALID;
ALTER TABLE envelope VALIDATE CONSTRAINT envelope_origin_check;
ALTER TABLE envelope DROP CONSTRAINT IF EXISTS envelope_backfill_run_id_fkey,
    ADD CONSTRAINT envelope_backfill_run_id_fkey FOREIGN KEY (backfill_run_id) REFERENCES backfill_run (id) NOT VALID;
ALTER TABLE envelope VALIDATE CONSTRAINT envelope_backfill_run_id_fkey;

-- +goose Down
ALTER TABLE envelope DROP CONSTRAINT IF EXISTS envelope_backfill_run_id_fkey,
    DROP CONSTRAINT IF EXISTS envelope_origin_check,
    DROP COLUMN IF EXISTS backfill_run_id,
    DROP COLUMN IF EXISTS origin;
DROP TABLE IF EXISTS backfill_run;
