-- Conflicts stored once per distinct body, and bounded per envelope (issue 22: each resend with a
-- different body stored a full copy, an identical variant resent 5 times made 5 rows, and 3,000 x
-- 64 KiB variants were stored in 31 s from one captured signed body). Now:
--   - a variant already recorded for the envelope (same body_sha256) is counted on its row
--     (repeats, last_received_at), not stored again;
--   - past envelope.MaxConflictVariants distinct variants per envelope (20), further variants keep
--     no body: they are counted on the envelope's one overflow row (overflow = true, body NULL,
--     the latest such variant's digest, size and headers).
-- So an envelope has at most 21 conflict rows whatever is sent. Rows from before keep repeats 1.
-- The envelope counts (00180) count conflicting deliveries: sum(repeats).

-- +goose Up
ALTER TABLE envelope_conflict
    ADD COLUMN repeats          integer NOT NULL DEFAULT 1 CHECK (repeats >= 1),
    ADD COLUMN last_received_at timestamptz,
    ADD COLUMN overflow         boolean NOT NULL DEFAULT false;
COMMENT ON COLUMN envelope_conflict.repeats IS 'deliveries of this variant (of any variant past the cap, on the overflow row)';
COMMENT ON COLUMN envelope_conflict.overflow IS 'true: the row counting variants past the per-envelope cap, whose bodies are not kept';

-- ingest finds a recorded variant and counts it (it holds the envelope's advisory lock meanwhile).
GRANT SELECT (envelope_id, body_sha256, overflow, repeats) ON envelope_conflict TO inbox_ingest;
GRANT UPDATE (repeats, last_received_at, body_sha256, body_size, headers) ON envelope_conflict TO inbox_ingest;

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION envelope_count_conflict() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
BEGIN
    IF TG_OP = 'TRUNCATE' THEN
        PERFORM pg_advisory_xact_lock(7305733214712620180);
        DELETE FROM envelope_count WHERE kind = 'conflict';
    ELSIF TG_OP = 'INSERT' THEN
        INSERT INTO envelope_count (source, kind, n)
        SELECT source, 'conflict', sum(repeats) FROM new_rows GROUP BY source;
    ELSIF TG_OP = 'UPDATE' THEN
        INSERT INTO envelope_count (source, kind, n)
        SELECT source, 'conflict', sum(d)
          FROM (SELECT source, repeats AS d FROM new_rows
                UNION ALL
                SELECT source, -repeats FROM old_rows) x
         GROUP BY source
        HAVING sum(d) <> 0;
    ELSE
        INSERT INTO envelope_count (source, kind, n)
        SELECT source, 'conflict', -sum(repeats) FROM old_rows GROUP BY source;
    END IF;
    RETURN NULL;
END
$$;
-- +goose StatementEnd

CREATE TRIGGER envelope_count_update AFTER UPDATE ON envelope_conflict
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION envelope_count_conflict();

-- +goose Down
DROP TRIGGER envelope_count_update ON envelope_conflict;
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION envelope_count_conflict() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
BEGIN
    IF TG_OP = 'TRUNCATE' THEN
        PERFORM pg_advisory_xact_lock(7305733214712620180);
        DELETE FROM envelope_count WHERE kind = 'conflict';
    ELSIF TG_OP = 'INSERT' THEN
        INSERT INTO envelope_count (source, kind, n)
        SELECT source, 'conflict', count(*) FROM new_rows GROUP BY source;
    ELSE
        INSERT INTO envelope_count (source, kind, n)
        SELECT source, 'conflict', -count(*) FROM old_rows GROUP BY source;
    END IF;
    RETURN NULL;
END
$$;
-- +goose StatementEnd
-- The counts go back to counting rows, as the restored trigger does.
SELECT pg_advisory_xact_lock(7305733214712620180);
DELETE FROM envelope_count WHERE kind = 'conflict';
INSERT INTO envelope_count (source, kind, n) SELECT source, 'conflict', count(*) FROM envelope_conflict GROUP BY source;
REVOKE UPDATE (repeats, last_received_at, body_sha256, body_size, headers) ON envelope_conflict FROM inbox_ingest;
REVOKE SELECT (envelope_id, body_sha256, overflow, repeats) ON envelope_conflict FROM inbox_ingest;
ALTER TABLE envelope_conflict DROP COLUMN overflow, DROP COLUMN last_received_at, DROP COLUMN repeats;
