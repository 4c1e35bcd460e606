-- Arrivals per minute (issue 23, the overview's "last hour"): how many envelopes each source received
-- in each minute of the last 25 hours, as data, so the console's overview and `worker stats` show the
-- rate of the last hour and the last day in O(sources x minutes), not with a count over the envelopes
-- received (7.2 M index entries for an hour at 2,000/s).
--
-- Kept like envelope_count: a statement-level trigger on envelope appends one delta row per (source,
-- minute) each INSERT statement stored (a batch of the group commit is one statement), so concurrent
-- writers never touch the same row, and a rolled-back transaction leaves nothing.
-- envelope_arrival_compact() (the worker's reconcile, every minute, with envelope_count_compact) folds
-- each minute's rows into one and drops the minutes older than 25 hours. An arrival is counted once, by
-- its received_at, whatever becomes of the envelope later (retention, resolve); an envelope stored
-- with a received_at already 25 hours old (a seeded or restored row) is not counted. Duplicates and
-- conflicts are not arrivals: envelope_count counts them.
--
-- No first fill: counting starts with this migration (counting the last 25 hours would read every
-- envelope received in them). A marker row (source '', n 0) records the minute it started, so for the
-- first day after the upgrade the overview and `worker stats` say since when they count; compaction
-- ages it out with the rest after 25 hours.

-- +goose Up
CREATE TABLE envelope_arrival (
    source text        NOT NULL,
    minute timestamptz NOT NULL,
    n      bigint      NOT NULL
);
COMMENT ON TABLE envelope_arrival IS
    'Envelopes received per source and minute (received_at) over the last 25 hours, as deltas whose sum is the count; kept by a trigger on envelope, folded and aged by envelope_arrival_compact()';
CREATE INDEX envelope_arrival_minute_idx ON envelope_arrival (minute);
-- Small and churned by every compaction: vacuum it by row count, not by a share of its size.
ALTER TABLE envelope_arrival SET (autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 5000,
    autovacuum_analyze_scale_factor = 0, autovacuum_analyze_threshold = 5000);

-- +goose StatementBegin
CREATE FUNCTION envelope_arrival_count() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO envelope_arrival (source, minute, n)
        SELECT source, date_bin('1 minute', received_at, '2000-01-01 00:00:00+00'), count(*)
          FROM new_rows
         WHERE received_at >= now() - interval '25 hours'
         GROUP BY 1, 2;
    ELSE -- TRUNCATE: what was received is gone; counting starts again now
        PERFORM pg_advisory_xact_lock(7305733214712620182); -- after any compaction in flight
        DELETE FROM envelope_arrival;
        INSERT INTO envelope_arrival (source, minute, n) VALUES ('', date_bin('1 minute', now(), '2000-01-01 00:00:00+00'), 0);
    END IF;
    RETURN NULL;
END
$$;
-- +goose StatementEnd

CREATE TRIGGER envelope_arrival_insert AFTER INSERT ON envelope
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION envelope_arrival_count();
CREATE TRIGGER envelope_arrival_truncate AFTER TRUNCATE ON envelope
    FOR EACH STATEMENT EXECUTE FUNCTION envelope_arrival_count();

-- +goose StatementBegin
-- Folds each minute's deltas into one row, drops the minutes older than 25 hours, and returns how many
-- rows it removed (0 when another compaction holds the lock: one at a time, the others skip). As
-- envelope_count_compact: concurrent writers are never blocked, and their new deltas are not in this
-- statement's snapshot, so they are neither deleted nor counted twice. Only minutes with more than
-- one row are rewritten, so a quiet table is not churned.
CREATE FUNCTION envelope_arrival_compact() RETURNS bigint
    LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
    folded bigint;
    aged bigint;
BEGIN
    IF NOT pg_try_advisory_xact_lock(7305733214712620182) THEN
        RETURN 0;
    END IF;
    DELETE FROM envelope_arrival WHERE minute < now() - interval '25 hours';
    GET DIAGNOSTICS aged = ROW_COUNT;
    WITH split AS (
        SELECT source, minute FROM envelope_arrival GROUP BY source, minute HAVING count(*) > 1
    ), gone AS (
        DELETE FROM envelope_arrival a USING split s
         WHERE a.source = s.source AND a.minute = s.minute
        RETURNING a.source, a.minute, a.n
    ), kept AS (
        INSERT INTO envelope_arrival (source, minute, n)
        SELECT source, minute, sum(n) FROM gone GROUP BY source, minute
        RETURNING 1
    )
    SELECT count(*) INTO folded FROM gone;
    RETURN folded + aged;
END
$$;
-- +goose StatementEnd

INSERT INTO envelope_arrival (source, minute, n) VALUES ('', date_bin('1 minute', now(), '2000-01-01 00:00:00+00'), 0);

REVOKE ALL ON FUNCTION envelope_arrival_compact() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION envelope_arrival_compact() TO inbox_worker, inbox_admin;
GRANT SELECT ON envelope_arrival TO inbox_worker, inbox_admin;

-- +goose Down
DROP TRIGGER envelope_arrival_truncate ON envelope;
DROP TRIGGER envelope_arrival_insert ON envelope;
DROP FUNCTION envelope_arrival_compact();
DROP FUNCTION envelope_arrival_count();
DROP TABLE envelope_arrival;
