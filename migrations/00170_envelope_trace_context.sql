-- The W3C traceparent of the ingest request that stored the envelope (NULL
-- when tracing was off), so every processing attempt, replays included,
-- joins the request's trace (internal/tracing). A nullable column with no
-- default: adding it rewrites nothing. Covered by the table-level grants of
-- 00110_roles.sql (ingest INSERT, worker and admin SELECT).

-- +goose Up
ALTER TABLE envelope ADD COLUMN trace_context text;

-- +goose Down
ALTER TABLE envelope DROP COLUMN IF EXISTS trace_context;
