-- Resolving a failed envelope (issue 23, item 3). A failed envelope whose cause cannot be fixed by a
-- replay (the stored body is immutable: an unknown currency fails on every replay) can be closed by an
-- operator: its status becomes 'resolved', with who, why and when in envelope_resolution, and 'failed'
-- again when un-resolved. Nothing else of it changes (body, payload, attempts, result, ledger). A resolved
-- envelope is final: it leaves the failed counts, alerts and indexes, holds no partition, and its body goes
-- with the body purge as a done one's does.
--
-- The status check is replaced NOT VALID: every row already satisfies the old, narrower check, and a
-- validating ADD would scan every partition under an exclusive lock (minutes at 100 M envelopes). New and
-- updated rows are checked.

-- +goose Up
LOCK TABLE envelope IN SHARE ROW EXCLUSIVE MODE;
ALTER TABLE envelope DROP CONSTRAINT envelope_status_check;
ALTER TABLE envelope ADD CONSTRAINT envelope_status_check
    CHECK (status IN ('pending', 'done', 'failed', 'ignored', 'resolved')) NOT VALID;

ALTER TABLE envelope_count DROP CONSTRAINT envelope_count_kind_check;
ALTER TABLE envelope_count ADD CONSTRAINT envelope_count_kind_check
    CHECK (kind IN ('pending', 'done', 'failed', 'ignored', 'resolved', 'duplicate', 'conflict'));

CREATE TABLE envelope_resolution (
    id           bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    envelope_id  bigint      NOT NULL,  -- no foreign key: the envelope's partition drop deletes these rows
    action       text        NOT NULL CHECK (action IN ('resolve', 'unresolve')),
    actor        text        NOT NULL CHECK (actor <> ''),
    reason       text        NOT NULL CHECK (reason <> ''),
    filter       jsonb       NOT NULL DEFAULT '{}'::jsonb, -- the command's selection (ids or filter flags)
    batch_id     uuid        NOT NULL,                     -- one per run
    at           timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX envelope_resolution_envelope_id_idx ON envelope_resolution (envelope_id, id);
CREATE INDEX envelope_resolution_at_idx ON envelope_resolution (at);
COMMENT ON TABLE envelope_resolution IS
    'One row per failed envelope an operator resolved (status failed -> resolved) or un-resolved (resolved -> failed): who, why, when, and the selection';

GRANT SELECT, INSERT ON envelope_resolution TO inbox_worker, inbox_admin;
GRANT USAGE ON SEQUENCE envelope_resolution_id_seq TO inbox_worker, inbox_admin;

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION public.envelope_count_envelope()
 RETURNS trigger
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'public', 'pg_temp'
AS $function$
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
        DELETE FROM envelope_count WHERE kind IN ('pending', 'done', 'failed', 'ignored', 'resolved');
    END IF;
    RETURN NULL;
END
$function$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION public.envelope_partition_drop(part text, cutoff timestamp with time zone, lock_wait interval DEFAULT '00:00:00.5'::interval)
 RETURNS TABLE(outcome text, envelopes bigint)
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'public', 'pg_temp'
AS $function$
DECLARE
    p envelope_partition;
    t text;
    buckets int4range;
    pending boolean;
BEGIN
    PERFORM pg_advisory_xact_lock(7305733214712620181);
    SELECT * INTO p FROM envelope_partition x WHERE x.name = part AND x.dropped_at IS NULL;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no live envelope partition %', part USING ERRCODE = 'undefined_table';
    END IF;
    IF p.upper_at > cutoff THEN
        RAISE EXCEPTION 'envelope partition % ends at %, after the cutoff %', part, p.upper_at, cutoff USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF EXISTS (SELECT 1 FROM envelope_partition x WHERE x.dropped_at IS NULL AND x.upper_id <= coalesce(p.lower_id, -9223372036854775808)) THEN
        RAISE EXCEPTION 'envelope partition % is not the oldest: drop the older ones first', part USING ERRCODE = 'invalid_parameter_value';
    END IF;
    PERFORM set_config('lock_timeout', (extract(epoch FROM lock_wait) * 1000)::bigint::text, true);
    -- No writer changes the partition from here on (a replay cannot make one of its envelopes
    -- pending between the check and the drop).
    EXECUTE format('LOCK TABLE %I IN SHARE MODE', 'envelope_' || part);
    EXECUTE format('SELECT EXISTS (SELECT 1 FROM %I WHERE status = %L)', 'envelope_' || part, 'pending') INTO pending;
    buckets := envelope_count_range(p.lower_id, p.upper_id);
    IF pending THEN
        RETURN QUERY SELECT 'held'::text, coalesce(sum(c.n), 0)::bigint FROM envelope_count c
                      WHERE c.kind = 'pending' AND c.bucket <@ buckets;
        RETURN;
    END IF;
    FOREACH t IN ARRAY ARRAY['envelope_conflict', 'envelope_duplicate', 'envelope_attempt', 'envelope'] LOOP
        EXECUTE format('ALTER TABLE %I DETACH PARTITION %I', t, t || '_' || part);
        EXECUTE format('DROP TABLE %I', t || '_' || part);
    END LOOP;
    PERFORM pg_advisory_xact_lock(7305733214712620180); -- after any compaction in flight
    UPDATE envelope_partition x SET dropped_at = now(),
           dropped_envelopes = (SELECT coalesce(sum(c.n), 0) FROM envelope_count c
                                 WHERE c.kind IN ('pending', 'done', 'failed', 'ignored', 'resolved') AND c.bucket <@ buckets)
     WHERE x.name = part AND x.dropped_at IS NULL
    RETURNING x.dropped_envelopes INTO envelopes;
    DELETE FROM envelope_count c WHERE c.bucket <@ buckets;
    DELETE FROM envelope_replay r WHERE r.envelope_id < p.upper_id AND (p.lower_id IS NULL OR r.envelope_id >= p.lower_id);
    DELETE FROM envelope_resolution r WHERE r.envelope_id < p.upper_id AND (p.lower_id IS NULL OR r.envelope_id >= p.lower_id);
    outcome := 'dropped';
    RETURN NEXT;
END
$function$;
-- +goose StatementEnd

-- +goose Down
LOCK TABLE envelope IN SHARE ROW EXCLUSIVE MODE;
UPDATE envelope SET status = 'failed' WHERE status = 'resolved';
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION public.envelope_count_envelope()
 RETURNS trigger
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'public', 'pg_temp'
AS $function$
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
$function$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION public.envelope_partition_drop(part text, cutoff timestamp with time zone, lock_wait interval DEFAULT '00:00:00.5'::interval)
 RETURNS TABLE(outcome text, envelopes bigint)
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'public', 'pg_temp'
AS $function$
DECLARE
    p envelope_partition;
    t text;
    buckets int4range;
    pending boolean;
BEGIN
    PERFORM pg_advisory_xact_lock(7305733214712620181);
    SELECT * INTO p FROM envelope_partition x WHERE x.name = part AND x.dropped_at IS NULL;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no live envelope partition %', part USING ERRCODE = 'undefined_table';
    END IF;
    IF p.upper_at > cutoff THEN
        RAISE EXCEPTION 'envelope partition % ends at %, after the cutoff %', part, p.upper_at, cutoff USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF EXISTS (SELECT 1 FROM envelope_partition x WHERE x.dropped_at IS NULL AND x.upper_id <= coalesce(p.lower_id, -9223372036854775808)) THEN
        RAISE EXCEPTION 'envelope partition % is not the oldest: drop the older ones first', part USING ERRCODE = 'invalid_parameter_value';
    END IF;
    PERFORM set_config('lock_timeout', (extract(epoch FROM lock_wait) * 1000)::bigint::text, true);
    -- No writer changes the partition from here on (a replay cannot make one of its envelopes
    -- pending between the check and the drop).
    EXECUTE format('LOCK TABLE %I IN SHARE MODE', 'envelope_' || part);
    EXECUTE format('SELECT EXISTS (SELECT 1 FROM %I WHERE status = %L)', 'envelope_' || part, 'pending') INTO pending;
    buckets := envelope_count_range(p.lower_id, p.upper_id);
    IF pending THEN
        RETURN QUERY SELECT 'held'::text, coalesce(sum(c.n), 0)::bigint FROM envelope_count c
                      WHERE c.kind = 'pending' AND c.bucket <@ buckets;
        RETURN;
    END IF;
    FOREACH t IN ARRAY ARRAY['envelope_conflict', 'envelope_duplicate', 'envelope_attempt', 'envelope'] LOOP
        EXECUTE format('ALTER TABLE %I DETACH PARTITION %I', t, t || '_' || part);
        EXECUTE format('DROP TABLE %I', t || '_' || part);
    END LOOP;
    PERFORM pg_advisory_xact_lock(7305733214712620180); -- after any compaction in flight
    UPDATE envelope_partition x SET dropped_at = now(),
           dropped_envelopes = (SELECT coalesce(sum(c.n), 0) FROM envelope_count c
                                 WHERE c.kind IN ('pending', 'done', 'failed', 'ignored') AND c.bucket <@ buckets)
     WHERE x.name = part AND x.dropped_at IS NULL
    RETURNING x.dropped_envelopes INTO envelopes;
    DELETE FROM envelope_count c WHERE c.bucket <@ buckets;
    DELETE FROM envelope_replay r WHERE r.envelope_id < p.upper_id AND (p.lower_id IS NULL OR r.envelope_id >= p.lower_id);
    outcome := 'dropped';
    RETURN NEXT;
END
$function$;
-- +goose StatementEnd

DROP TABLE envelope_resolution;
DELETE FROM envelope_count WHERE kind = 'resolved';
ALTER TABLE envelope_count DROP CONSTRAINT envelope_count_kind_check;
ALTER TABLE envelope_count ADD CONSTRAINT envelope_count_kind_check
    CHECK (kind IN ('pending', 'done', 'failed', 'ignored', 'duplicate', 'conflict'));
ALTER TABLE envelope DROP CONSTRAINT envelope_status_check;
ALTER TABLE envelope ADD CONSTRAINT envelope_status_check
    CHECK (status IN ('pending', 'done', 'failed', 'ignored')) NOT VALID;
