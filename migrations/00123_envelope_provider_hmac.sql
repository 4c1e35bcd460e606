-- Sources of the generic HMAC provider (Slack, Paddle Billing, Square, or any
-- sender configured by its signature header, algorithm and signed content)
-- store provider 'hmac'. Outside a transaction, and validated separately, so
-- the check of existing rows does not block ingest (VALIDATE takes a SHARE
-- UPDATE EXCLUSIVE lock); the new check only widens the old one.

-- +goose NO TRANSACTION
-- +goose Up
ALTER TABLE envelope DROP CONSTRAINT IF EXISTS envelope_provider_check,
    ADD CONSTRAINT envelope_provider_check
    CHECK (provider IN ('stripe', 'github', 'shopify', 'standard', 'hmac')) NOT VALID;
ALTER TABLE envelope VALIDATE CONSTRAINT envelope_provider_check;

-- +goose Down
ALTER TABLE envelope DROP CONSTRAINT IF EXISTS envelope_provider_check,
    ADD CONSTRAINT envelope_provider_check
    CHECK (provider IN ('stripe', 'github', 'shopify', 'standard')) NOT VALID;
ALTER TABLE envelope VALIDATE CONSTRAINT envelope_provider_check;
