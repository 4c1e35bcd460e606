-- Shopify may send one event under several X-Shopify-Webhook-Id values (its
-- "Ignore duplicate webhooks" guidance: dedupe on X-Shopify-Event-Id). Both
-- deliveries are stored; the worker processes the first and records later
-- ones as duplicates of it, looking them up by this index. CONCURRENTLY:
-- ingest writes envelope all the time, so the build must not block it.

-- +goose NO TRANSACTION
-- +goose Up
CREATE INDEX CONCURRENTLY IF NOT EXISTS envelope_shopify_event_idx
    ON envelope (source, (headers->>'X-Shopify-Event-Id'), id)
    WHERE provider = 'shopify';

-- +goose Down
DROP INDEX CONCURRENTLY IF EXISTS envelope_shopify_event_idx;
