-- Shopify may send one event under several X-Shopify-Webhook-Id values (its
-- "Ignore duplicate webhooks" guidance: dedupe on X-Shopify-Event-Id). Both
-- deliveries are stored; the worker processes the first and records later
-- ones as duplicates of it, looking them up by this index.

-- +goose Up
CREATE INDEX envelope_shopify_event_idx ON envelope (source, (headers->>'X-Shopify-Event-Id'), id)
    WHERE provider = 'shopify';

-- +goose Down
DROP INDEX envelope_shopify_event_idx;
