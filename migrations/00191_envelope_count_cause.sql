-- Failures by cause as data (issue 20: `worker stats` under 200 ms at any size). `worker stats` and the
-- console's failures panel group the failed envelopes by their cause; that was a scan of every failed
-- envelope (74 ms at 2 M envelopes, 2.5 % failed; linear in the failures kept). The counts' failed rows now
-- carry the cause (the count triggers group by it), so the grouping reads envelope_count, and the newest
-- envelope of each cause is one probe of a partial index per partition.
--
-- The upgrade recounts the failed envelopes by cause once, under a lock that holds writers off for a scan
-- of the failed envelopes only (through envelope_status_received_at_idx).

-- +goose Up
LOCK TABLE envelope IN SHARE ROW EXCLUSIVE MODE;

ALTER TABLE envelope_count ADD COLUMN cause text NOT NULL DEFAULT '';
COMMENT ON COLUMN envelope_count.cause IS 'for kind failed: the envelopes'' last_cause ('''' when none); '''' otherwise';

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION envelope_count_envelope() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO envelope_count (source, kind, bucket, cause, n)
        SELECT source, status, envelope_count_bucket(id), CASE WHEN status = 'failed' THEN coalesce(last_cause, '') ELSE '' END, count(*)
          FROM new_rows GROUP BY 1, 2, 3, 4;
    ELSIF TG_OP = 'UPDATE' THEN
        INSERT INTO envelope_count (source, kind, bucket, cause, n)
        SELECT source, status, b, c, sum(d)
          FROM (SELECT source, status, envelope_count_bucket(id) AS b,
                       CASE WHEN status = 'failed' THEN coalesce(last_cause, '') ELSE '' END AS c, 1 AS d FROM new_rows
                UNION ALL
                SELECT source, status, envelope_count_bucket(id),
                       CASE WHEN status = 'failed' THEN coalesce(last_cause, '') ELSE '' END, -1 FROM old_rows) x
         GROUP BY 1, 2, 3, 4
        HAVING sum(d) <> 0;
    ELSIF TG_OP = 'DELETE' THEN
        INSERT INTO envelope_count (source, kind, bucket, cause, n)
        SELECT source, status, envelope_count_bucket(id), CASE WHEN status = 'failed' THEN coalesce(last_cause, '') ELSE '' END, -count(*)
          FROM old_rows GROUP BY 1, 2, 3, 4;
    ELSIF TG_OP = 'TRUNCATE' THEN
        PERFORM pg_advisory_xact_lock(7305733214712620180); -- after any compaction in flight
        DELETE FROM envelope_count WHERE kind IN ('pending', 'done', 'failed', 'ignored');
    END IF;
    RETURN NULL;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION envelope_count_compact() RETURNS bigint
    LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
    folded bigint;
BEGIN
    IF NOT pg_try_advisory_xact_lock(7305733214712620180) THEN
        RETURN 0;
    END IF;
    WITH gone AS (
        DELETE FROM envelope_count RETURNING source, kind, bucket, cause, n
    ), per_second AS (
        SELECT source, kind, bucket, cause, sum(n) AS n FROM gone GROUP BY source, kind, bucket, cause
    ), kept AS (
        -- each partition's deltas onto its first second (legacy: the smallest)
        INSERT INTO envelope_count (source, kind, bucket, cause, n)
        SELECT x.source, x.kind, coalesce(CASE WHEN p.upper_id IS NOT NULL THEN coalesce(p.lower_id >> 20, 0) END, x.bucket), x.cause, sum(x.n)
          FROM per_second x
          LEFT JOIN envelope_partition p
            ON p.dropped_at IS NULL AND x.bucket <@ envelope_count_range(p.lower_id, p.upper_id)
         GROUP BY 1, 2, 3, 4
        HAVING sum(x.n) <> 0
        RETURNING 1
    )
    SELECT count(*) INTO folded FROM gone;
    RETURN folded;
END
$$;
-- +goose StatementEnd

SELECT pg_advisory_xact_lock(7305733214712620180);
DELETE FROM envelope_count WHERE kind = 'failed';
INSERT INTO envelope_count (source, kind, bucket, cause, n)
SELECT source, 'failed', envelope_count_bucket(id), coalesce(last_cause, ''), count(*) FROM envelope WHERE status = 'failed' GROUP BY 1, 3, 4;

CREATE INDEX envelope_failed_cause_idx ON envelope ((coalesce(last_cause, '')), id) WHERE status = 'failed';

-- +goose Down
DROP INDEX envelope_failed_cause_idx;
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION envelope_count_envelope() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO envelope_count (source, kind, bucket, n)
        SELECT source, status, envelope_count_bucket(id), count(*) FROM new_rows GROUP BY 1, 2, 3;
    ELSIF TG_OP = 'UPDATE' THEN
        INSERT INTO envelope_count (source, kind, bucket, n)
        SELECT source, status, b, sum(d)
          FROM (SELECT source, status, envelope_count_bucket(id) AS b, 1 AS d FROM new_rows
                UNION ALL
                SELECT source, status, envelope_count_bucket(id), -1 FROM old_rows) x
         GROUP BY 1, 2, 3
        HAVING sum(d) <> 0;
    ELSIF TG_OP = 'DELETE' THEN
        INSERT INTO envelope_count (source, kind, bucket, n)
        SELECT source, status, envelope_count_bucket(id), -count(*) FROM old_rows GROUP BY 1, 2, 3;
    ELSIF TG_OP = 'TRUNCATE' THEN
        PERFORM pg_advisory_xact_lock(7305733214712620180);
        DELETE FROM envelope_count WHERE kind IN ('pending', 'done', 'failed', 'ignored');
    END IF;
    RETURN NULL;
END
$$;
-- +goose StatementEnd
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION envelope_count_compact() RETURNS bigint
    LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
    folded bigint;
BEGIN
    IF NOT pg_try_advisory_xact_lock(7305733214712620180) THEN
        RETURN 0;
    END IF;
    WITH gone AS (
        DELETE FROM envelope_count RETURNING source, kind, bucket, n
    ), per_second AS (
        SELECT source, kind, bucket, sum(n) AS n FROM gone GROUP BY source, kind, bucket
    ), kept AS (
        INSERT INTO envelope_count (source, kind, bucket, n)
        SELECT x.source, x.kind, coalesce(CASE WHEN p.upper_id IS NOT NULL THEN coalesce(p.lower_id >> 20, 0) END, x.bucket), sum(x.n)
          FROM per_second x
          LEFT JOIN envelope_partition p
            ON p.dropped_at IS NULL AND x.bucket <@ envelope_count_range(p.lower_id, p.upper_id)
         GROUP BY 1, 2, 3
        HAVING sum(x.n) <> 0
        RETURNING 1
    )
    SELECT count(*) INTO folded FROM gone;
    RETURN folded;
END
$$;
-- +goose StatementEnd
ALTER TABLE envelope_count DROP COLUMN cause;
