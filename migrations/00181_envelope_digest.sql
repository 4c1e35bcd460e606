-- Replayed bodies (issue 22): GitHub, Shopify and hmac sources that take the delivery id from a
-- header sign the body but not the id, so a captured signed body resent under a new id verified
-- and was stored (and forwarded) as a new delivery each time. envelope_digest remembers, per
-- source, a digest of each such delivery's event type and body for the source's replay window
-- (expires_at): a delivery whose digest is live under another delivery id is that delivery
-- replayed, answered 200 duplicate and recorded in envelope_duplicate with the id it came under
-- (replayed_as). A narrow, window-bounded key table: it does not grow with the envelopes kept,
-- and the worker's reconcile deletes expired rows in batches.

-- +goose Up
CREATE TABLE envelope_digest (
    source      text        NOT NULL,
    digest      bytea       NOT NULL CHECK (octet_length(digest) = 32), -- sha256(event type || 0x00 || body)
    delivery_id text        NOT NULL, -- the delivery that claimed it: its envelope is (source, delivery_id)
    expires_at  timestamptz NOT NULL,
    PRIMARY KEY (source, digest)
);
CREATE INDEX envelope_digest_expires_at_idx ON envelope_digest (expires_at);
COMMENT ON TABLE envelope_digest IS
    'Digests of deliveries whose id the signature does not cover, for the source''s replay window: the same signed body under another id is a replay';

ALTER TABLE envelope_duplicate ADD COLUMN replayed_as text;
COMMENT ON COLUMN envelope_duplicate.replayed_as IS
    'NULL: the provider''s retry under the same delivery id; else the new delivery id a captured signed body was replayed under';

GRANT SELECT, INSERT, UPDATE ON envelope_digest TO inbox_ingest;
GRANT SELECT, DELETE ON envelope_digest TO inbox_worker;
GRANT SELECT ON envelope_digest TO inbox_admin;

-- +goose Down
ALTER TABLE envelope_duplicate DROP COLUMN replayed_as;
DROP TABLE envelope_digest;
