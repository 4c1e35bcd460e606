-- Indexes for retention (internal/retention): the purge walks final
-- envelopes in (processed_at, id) order. One index serves the deletion of
-- old tombstones; the other holds only envelopes that still have a body, so
-- dropping bodies never rescans rows whose body is already gone.

-- +goose Up
CREATE INDEX envelope_final_processed_at_idx ON envelope (processed_at, id)
    WHERE status IN ('done', 'ignored');
CREATE INDEX envelope_body_kept_processed_at_idx ON envelope (processed_at, id)
    WHERE status IN ('done', 'ignored') AND body_purged_at IS NULL;

-- +goose Down
DROP INDEX envelope_body_kept_processed_at_idx;
DROP INDEX envelope_final_processed_at_idx;
