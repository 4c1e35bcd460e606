-- Counters as data (issue 20): per source, how many envelopes are in each status and how many
-- duplicate and conflicting deliveries it received, kept current by the statements that change
-- them, so that a /metrics scrape and `worker stats` cost O(sources), not a scan of the envelope
-- table (at 6 M envelopes that scan took 8 s and the metrics collector's 3 s bound expired).
--
-- The table is append-only for writers: every INSERT, UPDATE or DELETE statement on envelope (and
-- every INSERT or DELETE on envelope_duplicate, envelope_conflict) appends one delta row per
-- (source, kind) it changed, from a statement-level trigger over its transition tables. So two
-- concurrent transactions never update the same counter row (no lock queue on a hot row, no
-- deadlock), and a transaction that rolls back leaves no delta. The count of (source, kind) is
-- sum(n) over its rows. envelope_count_compact() folds the deltas into one row per (source, kind)
-- (the worker's periodic reconcile calls it every minute), so readers sum a few rows per source
-- plus the last minute's deltas.
--
-- The trigger functions are SECURITY DEFINER (owned by the schema's owner, search_path pinned):
-- ingest and the worker write their counts without any grant on envelope_count.
--
-- The first fill counts what is there, under a lock that holds the writers off for the count's
-- duration (one scan of envelope: about a minute per 10 M envelopes on 2 cores; ingest answers
-- 503 and retries land as duplicates meanwhile, see docs/operations.md, "Upgrading").

-- +goose Up
CREATE TABLE envelope_count (
    source text   NOT NULL,
    kind   text   NOT NULL CHECK (kind IN ('pending', 'done', 'failed', 'ignored', 'duplicate', 'conflict')),
    n      bigint NOT NULL
);
COMMENT ON TABLE envelope_count IS
    'Per source and kind (an envelope status, duplicate or conflict), deltas whose sum is the count; kept by triggers, folded by envelope_count_compact()';
-- Small and churned by every compaction: vacuum it by row count, not by a share of its size.
ALTER TABLE envelope_count SET (autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 5000,
    autovacuum_analyze_scale_factor = 0, autovacuum_analyze_threshold = 5000);

LOCK TABLE envelope, envelope_duplicate, envelope_conflict IN SHARE ROW EXCLUSIVE MODE;

-- +goose StatementBegin
CREATE FUNCTION envelope_count_envelope() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO envelope_count (source, kind, n)
        SELECT source, status, count(*) FROM new_rows GROUP BY source, status;
    ELSIF TG_OP = 'UPDATE' THEN
        INSERT INTO envelope_count (source, kind, n)
        SELECT source, status, sum(d)
          FROM (SELECT source, status, 1 AS d FROM new_rows
                UNION ALL
                SELECT source, status, -1 FROM old_rows) x
         GROUP BY source, status
        HAVING sum(d) <> 0;
    ELSIF TG_OP = 'DELETE' THEN
        INSERT INTO envelope_count (source, kind, n)
        SELECT source, status, -count(*) FROM old_rows GROUP BY source, status;
    ELSIF TG_OP = 'TRUNCATE' THEN
        PERFORM pg_advisory_xact_lock(7305733214712620180); -- after any compaction in flight
        DELETE FROM envelope_count;
    END IF;
    RETURN NULL;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE FUNCTION envelope_count_duplicate() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
BEGIN
    -- envelope_duplicate has no source: its envelope's (which exists: the foreign key, and
    -- retention deletes duplicates before their envelope).
    IF TG_OP = 'TRUNCATE' THEN
        PERFORM pg_advisory_xact_lock(7305733214712620180);
        DELETE FROM envelope_count WHERE kind = 'duplicate';
    ELSIF TG_OP = 'INSERT' THEN
        INSERT INTO envelope_count (source, kind, n)
        SELECT e.source, 'duplicate', count(*) FROM new_rows x JOIN envelope e ON e.id = x.envelope_id GROUP BY e.source;
    ELSE
        INSERT INTO envelope_count (source, kind, n)
        SELECT e.source, 'duplicate', -count(*) FROM old_rows x JOIN envelope e ON e.id = x.envelope_id GROUP BY e.source;
    END IF;
    RETURN NULL;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE FUNCTION envelope_count_conflict() RETURNS trigger
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

CREATE TRIGGER envelope_count_insert AFTER INSERT ON envelope
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION envelope_count_envelope();
CREATE TRIGGER envelope_count_update AFTER UPDATE ON envelope
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION envelope_count_envelope();
CREATE TRIGGER envelope_count_delete AFTER DELETE ON envelope
    REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION envelope_count_envelope();
CREATE TRIGGER envelope_count_truncate AFTER TRUNCATE ON envelope
    FOR EACH STATEMENT EXECUTE FUNCTION envelope_count_envelope();
CREATE TRIGGER envelope_count_insert AFTER INSERT ON envelope_duplicate
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION envelope_count_duplicate();
CREATE TRIGGER envelope_count_delete AFTER DELETE ON envelope_duplicate
    REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION envelope_count_duplicate();
CREATE TRIGGER envelope_count_truncate AFTER TRUNCATE ON envelope_duplicate
    FOR EACH STATEMENT EXECUTE FUNCTION envelope_count_duplicate();
CREATE TRIGGER envelope_count_insert AFTER INSERT ON envelope_conflict
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION envelope_count_conflict();
CREATE TRIGGER envelope_count_delete AFTER DELETE ON envelope_conflict
    REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION envelope_count_conflict();
CREATE TRIGGER envelope_count_truncate AFTER TRUNCATE ON envelope_conflict
    FOR EACH STATEMENT EXECUTE FUNCTION envelope_count_conflict();

-- +goose StatementBegin
-- Folds the deltas into one row per (source, kind) and returns how many rows it folded (0 when
-- another compaction holds the lock: one at a time, the others skip). Concurrent writers are
-- never blocked: their new deltas are not in this statement's snapshot, so they are neither
-- deleted nor counted twice. Safe to call at any time, from any number of processes.
CREATE FUNCTION envelope_count_compact() RETURNS bigint
    LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
    folded bigint;
BEGIN
    IF NOT pg_try_advisory_xact_lock(7305733214712620180) THEN
        RETURN 0;
    END IF;
    WITH gone AS (
        DELETE FROM envelope_count RETURNING source, kind, n
    ), kept AS (
        INSERT INTO envelope_count (source, kind, n)
        SELECT source, kind, sum(n) FROM gone GROUP BY source, kind HAVING sum(n) <> 0
        RETURNING 1
    )
    SELECT count(*) INTO folded FROM gone;
    RETURN folded;
END
$$;
-- +goose StatementEnd

INSERT INTO envelope_count (source, kind, n)
SELECT source, status, count(*) FROM envelope GROUP BY source, status;
INSERT INTO envelope_count (source, kind, n)
SELECT e.source, 'duplicate', count(*) FROM envelope_duplicate x JOIN envelope e ON e.id = x.envelope_id GROUP BY e.source;
INSERT INTO envelope_count (source, kind, n)
SELECT source, 'conflict', count(*) FROM envelope_conflict GROUP BY source;

REVOKE ALL ON FUNCTION envelope_count_compact() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION envelope_count_compact() TO inbox_worker, inbox_admin;
GRANT SELECT ON envelope_count TO inbox_worker, inbox_admin;

-- +goose Down
DROP TRIGGER envelope_count_truncate ON envelope_conflict;
DROP TRIGGER envelope_count_truncate ON envelope_duplicate;
DROP TRIGGER envelope_count_delete ON envelope_conflict;
DROP TRIGGER envelope_count_insert ON envelope_conflict;
DROP TRIGGER envelope_count_delete ON envelope_duplicate;
DROP TRIGGER envelope_count_insert ON envelope_duplicate;
DROP TRIGGER envelope_count_truncate ON envelope;
DROP TRIGGER envelope_count_delete ON envelope;
DROP TRIGGER envelope_count_update ON envelope;
DROP TRIGGER envelope_count_insert ON envelope;
DROP FUNCTION envelope_count_compact();
DROP FUNCTION envelope_count_conflict();
DROP FUNCTION envelope_count_duplicate();
DROP FUNCTION envelope_count_envelope();
DROP TABLE envelope_count;
