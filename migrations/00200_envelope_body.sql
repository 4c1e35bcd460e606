-- Bodies in a table of their own, dropped a partition at a time (issue 20, item 4): `worker purge` no longer
-- rewrites envelope rows to drop bodies after --purge-body-after.
--
-- envelope_body holds each envelope's raw body and parsed payload (id, body, payload), partitioned on the
-- same id ranges as envelope, written by the same insert statement in ingest's transaction, never
-- updated. envelope_body_drop(part, cutoff) detaches and drops a partition's bodies once the
-- partition ended before the body cutoff: O(1), no dead tuples, no WAL per row. The envelope rows stay
-- (the tombstones) until their own partition goes at --purge-delete-after.
--
-- What keeps its body past the drop: an envelope that failed or was resolved. The worker copies the
-- body and payload into the envelope's own row when it fails one (2.5 % of envelopes in the brief's mix;
-- a replay may come any time until the partition goes), and envelope_body_keep copies any it finds
-- without one before the drop. A resolved envelope's copy is dropped by the row-by-row purge once it was
-- resolved longer ago than the body window, as before; a copy kept by an envelope replayed to done stays
-- until its partition goes. A partition still holding a pending envelope is held, as for the partition
-- drop. Envelopes a ledger transaction references no longer keep their body: the posting
-- keeps its link to the delivery (source, delivery id, envelope id), and the envelope row its hash.
--
-- The envelope's body and payload columns stay, for the rows that hold their body in line: those stored
-- before this migration (envelope_partition.bodies_in_rows marks their partitions; the row purge walks
-- only those, and the copies' statuses), and the copies. A reader takes coalesce(e.body, b.body).
--
-- envelope_body_dropped_at(id): when the body partition of envelope id was dropped (NULL: not dropped).
--
-- Upgrading: stop the workers of the previous release before `worker migrate` (they read bodies from the
-- row, and would fail the envelopes the new ingest stores); an older ingest still running afterwards
-- stores bodies in rows of days not marked bodies_in_rows, kept until their partition goes.

-- +goose Up
CREATE TABLE envelope_body (
    id      bigint NOT NULL,
    body    bytea  NOT NULL,
    payload jsonb,
    PRIMARY KEY (id)
) PARTITION BY RANGE (id);
COMMENT ON TABLE envelope_body IS
    'Each envelope''s raw body (byte for byte) and parsed payload (the event document, NULL when not JSON), partitioned on envelope''s id ranges and dropped a partition at a time after the body window (envelope_body_drop); a failed or resolved envelope keeps a copy in its own row';
GRANT INSERT ON envelope_body TO inbox_ingest;
GRANT SELECT, INSERT ON envelope_body TO inbox_worker, inbox_admin;

ALTER TABLE envelope_partition
    ADD COLUMN bodies_in_rows  boolean NOT NULL DEFAULT false,
    ADD COLUMN body_dropped_at timestamptz;
COMMENT ON COLUMN envelope_partition.bodies_in_rows IS
    'Its envelopes were (some) stored before envelope_body (00200), with their body in the envelope row: the row-by-row body purge goes through it';
COMMENT ON COLUMN envelope_partition.body_dropped_at IS
    'When its envelope_body partition was dropped (envelope_body_drop): its envelopes'' bodies are gone, but for the copies a failed or resolved envelope keeps in its row';

-- +goose StatementBegin
DO $$
DECLARE
    p envelope_partition;
BEGIN
    -- Every partition that may already hold a row keeps the row purge; those still to come (and the
    -- current one, which receives envelopes from now on) get their body partition.
    UPDATE envelope_partition SET bodies_in_rows = true WHERE dropped_at IS NULL AND (lower_at IS NULL OR lower_at <= now());
    FOR p IN SELECT * FROM envelope_partition WHERE dropped_at IS NULL AND lower_id IS NOT NULL AND upper_at > now() LOOP
        EXECUTE format('CREATE TABLE %I (LIKE envelope_body INCLUDING DEFAULTS INCLUDING CONSTRAINTS)', 'envelope_body_' || p.name);
        EXECUTE format('ALTER TABLE envelope_body ATTACH PARTITION %I FOR VALUES FROM (%s) TO (%s)', 'envelope_body_' || p.name, p.lower_id, p.upper_id);
    END LOOP;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION envelope_partition_create(lower_at timestamptz, upper_at timestamptz) RETURNS text
    LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
    l timestamp := lower_at AT TIME ZONE 'UTC';
    name text := to_char(l, 'YYYYMMDD')
                 || CASE WHEN upper_at - lower_at = interval '1 day' AND date_trunc('day', l) = l THEN ''
                         WHEN date_trunc('hour', l) = l THEN 'h' || to_char(l, 'HH24')
                         ELSE 'h' || to_char(l, 'HH24MISS') END;
    lo bigint := envelope_id_at(lower_at);
    hi bigint := envelope_id_at(upper_at);
    t text;
BEGIN
    IF upper_at <= lower_at OR upper_at - lower_at > interval '1 day'
       OR date_trunc('second', lower_at) <> lower_at OR date_trunc('second', upper_at) <> upper_at THEN
        RAISE EXCEPTION 'envelope partition [%, %): must start and end on whole seconds, at most a day apart', lower_at, upper_at
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    FOREACH t IN ARRAY ARRAY['envelope', 'envelope_body', 'envelope_attempt', 'envelope_duplicate', 'envelope_conflict'] LOOP
        -- LIKE and ATTACH rather than PARTITION OF: ATTACH holds the parent in SHARE UPDATE
        -- EXCLUSIVE mode, which does not block ingest or the worker.
        EXECUTE format('CREATE TABLE %I (LIKE %I INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING GENERATED)', t || '_' || name, t);
        EXECUTE format('ALTER TABLE %I ATTACH PARTITION %I FOR VALUES FROM (%s) TO (%s)', t, t || '_' || name, lo, hi);
    END LOOP;
    INSERT INTO envelope_partition (name, lower_id, upper_id, lower_at, upper_at)
    VALUES (name, lo, hi, lower_at, upper_at);
    RETURN name;
END
$$;
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
    -- The parents first, envelope first (what ingest's and the worker's statements lock first), as
    -- every DETACH below needs them: no transaction can then hold a partition the drop waits for while
    -- it waits for the drop. Taking the day's partition first, as before 00200, deadlocked with the
    -- worker's transactions and gave up (busy) on every run under traffic
    -- (TestPartitionDropUnderIngestAndWorkerTraffic).
    LOCK TABLE ONLY envelope, envelope_body, envelope_attempt, envelope_duplicate, envelope_conflict IN ACCESS EXCLUSIVE MODE;
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
    FOREACH t IN ARRAY ARRAY['envelope_body', 'envelope_conflict', 'envelope_duplicate', 'envelope_attempt', 'envelope'] LOOP
        CONTINUE WHEN to_regclass(t || '_' || part) IS NULL; -- a body partition already dropped, or never made (00200)
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

-- +goose StatementBegin
-- Copies into its row the body of each failed or resolved envelope of partition <part> that has no copy
-- (the worker makes one when it fails an envelope; this catches any other: one failed by an older worker),
-- so it can still be replayed once its day's bodies are dropped; returns how many. Row locks only: run it
-- before envelope_body_drop, in a transaction of its own, so that the drop's lock is held for no copy.
CREATE FUNCTION envelope_body_keep(part text) RETURNS bigint
    LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
    copied bigint;
BEGIN
    IF to_regclass('envelope_body_' || part) IS NULL THEN
        RETURN 0;
    END IF;
    EXECUTE format('UPDATE %I e SET body = b.body, payload = b.payload FROM %I b
                     WHERE b.id = e.id AND e.status IN (%L, %L) AND e.body IS NULL AND e.payload IS NULL AND e.body_purged_at IS NULL',
                   'envelope_' || part, 'envelope_body_' || part, 'failed', 'resolved');
    GET DIAGNOSTICS copied = ROW_COUNT;
    RETURN copied;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Drops envelope_body_<part>, the bodies of the envelopes stored in partition <part>, which must have
-- ended at or before cutoff (now() - the body window), and returns 'dropped' with how many bodies went
-- (the day's done and ignored envelopes, from the counts; for a partition that also holds bodies in
-- rows, the body table's rows less the copies made); or, changing nothing, 'held' with how many
-- envelopes are pending (work not done keeps its body; an empty body table holds nothing).
--
-- Locks: the parent envelope_body in ACCESS EXCLUSIVE mode first, as DETACH needs it, and nothing else
-- before it (but the partition-change advisory lock), so no reader or writer of bodies, which lock the
-- parent before any partition, can hold something the drop waits for. Once it has it, no transaction
-- holds a body: a replay that checked this day's bodies is over (it held its lock until it committed), and
-- none can make an envelope pending, or find a body, until the drop commits. Everyone touching bodies
-- waits for the drop's few milliseconds (the checks, the copy of any straggler, the DETACH and DROP); the
-- drop waits at most lock_wait for those before it (lock_not_available: busy, retried by the next purge).
-- No lock on the envelope partition: only a replay makes one of its envelopes pending, and the failed
-- ones were copied by envelope_body_keep.
CREATE FUNCTION envelope_body_drop(part text, cutoff timestamptz, lock_wait interval DEFAULT interval '500 milliseconds')
    RETURNS TABLE (outcome text, bodies bigint)
    LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
    p envelope_partition;
    buckets int4range;
    pending boolean;
    copied bigint;
    n bigint;
BEGIN
    PERFORM pg_advisory_xact_lock(7305733214712620181); -- one partition change at a time
    SELECT * INTO p FROM envelope_partition x
     WHERE x.name = part AND x.dropped_at IS NULL AND x.body_dropped_at IS NULL AND to_regclass('envelope_body_' || part) IS NOT NULL;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no live body partition envelope_body_%', part USING ERRCODE = 'undefined_table';
    END IF;
    IF p.upper_at > cutoff THEN
        RAISE EXCEPTION 'envelope partition % ends at %, after the cutoff %', part, p.upper_at, cutoff USING ERRCODE = 'invalid_parameter_value';
    END IF;
    buckets := envelope_count_range(p.lower_id, p.upper_id);
    -- What goes, counted before the lock: no envelope is stored into a day past the body window.
    IF p.bodies_in_rows THEN
        EXECUTE format('SELECT count(*) FROM %I', 'envelope_body_' || part) INTO n;
    ELSE
        SELECT coalesce(sum(c.n), 0) INTO n FROM envelope_count c WHERE c.kind IN ('done', 'ignored') AND c.bucket <@ buckets;
    END IF;
    PERFORM set_config('lock_timeout', (extract(epoch FROM lock_wait) * 1000)::bigint::text, true);
    LOCK TABLE envelope_body IN ACCESS EXCLUSIVE MODE;
    IF n > 0 OR NOT p.bodies_in_rows THEN -- an empty body table of a day stored in rows holds no work
        EXECUTE format('SELECT EXISTS (SELECT 1 FROM %I WHERE status = %L)', 'envelope_' || part, 'pending') INTO pending;
        IF pending THEN
            RETURN QUERY SELECT 'held'::text, coalesce(sum(c.n), 0)::bigint FROM envelope_count c
                          WHERE c.kind = 'pending' AND c.bucket <@ buckets;
            RETURN;
        END IF;
    END IF;
    copied := envelope_body_keep(part); -- stragglers since envelope_body_keep ran: none, or a few
    EXECUTE format('ALTER TABLE envelope_body DETACH PARTITION %I', 'envelope_body_' || part);
    EXECUTE format('DROP TABLE %I', 'envelope_body_' || part);
    UPDATE envelope_partition x SET body_dropped_at = now() WHERE x.name = part AND x.dropped_at IS NULL;
    RETURN QUERY SELECT 'dropped'::text, CASE WHEN p.bodies_in_rows THEN n - copied ELSE n END;
END
$$;
-- +goose StatementEnd
REVOKE ALL ON FUNCTION envelope_body_drop(text, timestamptz, interval), envelope_body_keep(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION envelope_body_drop(text, timestamptz, interval), envelope_body_keep(text) TO inbox_worker, inbox_admin;

CREATE FUNCTION envelope_body_dropped_at(id bigint) RETURNS timestamptz
    LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT p.body_dropped_at FROM envelope_partition p
     WHERE p.dropped_at IS NULL AND p.lower_id <= id AND id < p.upper_id
$$;
COMMENT ON FUNCTION envelope_body_dropped_at(bigint) IS
    'When the body partition of envelope id was dropped by retention; NULL while it lives (or for a row stored before envelope_body)';

-- envelope as it reads with its body wherever it is stored: for operators' queries (docs/audit.md) and
-- tests. A filter on id prunes both tables' partitions.
CREATE VIEW envelope_with_body AS
SELECT e.id, e.source, e.provider, e.delivery_id, e.event_type, e.status,
       coalesce(e.body, b.body) AS body, coalesce(e.payload, b.payload) AS payload,
       e.headers, e.body_sha256, e.body_size, e.signed_at, e.received_at, e.processed_at, e.attempts,
       e.last_error, e.result,
       CASE WHEN e.body IS NULL AND e.payload IS NULL AND b.id IS NULL
            THEN coalesce(e.body_purged_at, envelope_body_dropped_at(e.id)) END AS body_purged_at,
       e.origin, e.backfill_run_id, e.trace_context, e.last_cause
  FROM envelope e LEFT JOIN envelope_body b ON b.id = e.id;
COMMENT ON VIEW envelope_with_body IS
    'envelope with its body and payload read from envelope_body or, for a row that holds them (stored before 00200, or a failed envelope''s copy), from the row';
GRANT SELECT ON envelope_with_body TO inbox_admin;

-- +goose StatementBegin
DO $$
DECLARE
    v text;
    def text;
    changed text;
BEGIN
    FOREACH v IN ARRAY ARRAY['envelope_audit', 'envelope_conflict_audit'] LOOP
        def := pg_get_viewdef(v);
        changed := replace(replace(def,
            '(e.body IS NOT NULL) AS body_kept',
            '(e.body IS NOT NULL OR e.payload IS NOT NULL OR EXISTS (SELECT 1 FROM envelope_body b WHERE b.id = e.id)) AS body_kept'),
            'e.body_purged_at,',
            'CASE WHEN e.body IS NULL AND e.payload IS NULL THEN COALESCE(e.body_purged_at, envelope_body_dropped_at(e.id)) END AS body_purged_at,');
        changed := replace(changed,
            'e.body_purged_at AS original_body_purged_at',
            'CASE WHEN e.body IS NULL AND e.payload IS NULL THEN COALESCE(e.body_purged_at, envelope_body_dropped_at(e.id)) END AS original_body_purged_at');
        IF changed = def THEN
            RAISE EXCEPTION 'view % is not the one 00200 expects', v;
        END IF;
        EXECUTE format('CREATE OR REPLACE VIEW %I AS %s', v, changed);
    END LOOP;
END
$$;
-- +goose StatementEnd

-- +goose Down
-- Bodies go back into their rows first (nothing is lost), then the table; rows whose day's bodies were
-- dropped get that time as their body_purged_at, as the row purge would have set.
UPDATE envelope e SET body = b.body, payload = b.payload FROM envelope_body b
 WHERE b.id = e.id AND e.body IS NULL AND e.payload IS NULL AND e.body_purged_at IS NULL;
UPDATE envelope e SET body_purged_at = p.body_dropped_at FROM envelope_partition p
 WHERE p.body_dropped_at IS NOT NULL AND p.dropped_at IS NULL AND e.id >= p.lower_id AND e.id < p.upper_id
   AND e.body IS NULL AND e.payload IS NULL AND e.body_purged_at IS NULL;
-- +goose StatementBegin
DO $$
DECLARE
    v text;
    def text;
BEGIN
    FOREACH v IN ARRAY ARRAY['envelope_audit', 'envelope_conflict_audit'] LOOP
        def := pg_get_viewdef(v);
        def := replace(def, '((e.body IS NOT NULL) OR (e.payload IS NOT NULL) OR (EXISTS ( SELECT 1
           FROM envelope_body b
          WHERE (b.id = e.id)))) AS body_kept', '(e.body IS NOT NULL) AS body_kept');
        def := regexp_replace(def, 'CASE\s+WHEN \(\(e\.body IS NULL\) AND \(e\.payload IS NULL\)\) THEN COALESCE\(e\.body_purged_at, envelope_body_dropped_at\(e\.id\)\)\s+ELSE NULL::timestamp with time zone\s+END AS (\w+)',
                              'e.body_purged_at AS \1', 'g');
        def := replace(def, 'e.body_purged_at AS body_purged_at', 'e.body_purged_at');
        IF def LIKE '%envelope_body%' THEN
            RAISE EXCEPTION 'view % still reads envelope_body: restore it by hand', v;
        END IF;
        EXECUTE format('CREATE OR REPLACE VIEW %I AS %s', v, def);
    END LOOP;
END
$$;
-- +goose StatementEnd
DROP VIEW envelope_with_body;
DROP FUNCTION envelope_body_dropped_at(bigint);
DROP FUNCTION envelope_body_drop(text, timestamptz, interval);
DROP FUNCTION envelope_body_keep(text);

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION envelope_partition_create(lower_at timestamptz, upper_at timestamptz) RETURNS text
    LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
    l timestamp := lower_at AT TIME ZONE 'UTC';
    name text := to_char(l, 'YYYYMMDD')
                 || CASE WHEN upper_at - lower_at = interval '1 day' AND date_trunc('day', l) = l THEN ''
                         WHEN date_trunc('hour', l) = l THEN 'h' || to_char(l, 'HH24')
                         ELSE 'h' || to_char(l, 'HH24MISS') END;
    lo bigint := envelope_id_at(lower_at);
    hi bigint := envelope_id_at(upper_at);
    t text;
BEGIN
    IF upper_at <= lower_at OR upper_at - lower_at > interval '1 day'
       OR date_trunc('second', lower_at) <> lower_at OR date_trunc('second', upper_at) <> upper_at THEN
        RAISE EXCEPTION 'envelope partition [%, %): must start and end on whole seconds, at most a day apart', lower_at, upper_at
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    FOREACH t IN ARRAY ARRAY['envelope', 'envelope_attempt', 'envelope_duplicate', 'envelope_conflict'] LOOP
        -- LIKE and ATTACH rather than PARTITION OF: ATTACH holds the parent in SHARE UPDATE
        -- EXCLUSIVE mode, which does not block ingest or the worker.
        EXECUTE format('CREATE TABLE %I (LIKE %I INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING GENERATED)', t || '_' || name, t);
        EXECUTE format('ALTER TABLE %I ATTACH PARTITION %I FOR VALUES FROM (%s) TO (%s)', t, t || '_' || name, lo, hi);
    END LOOP;
    INSERT INTO envelope_partition (name, lower_id, upper_id, lower_at, upper_at)
    VALUES (name, lo, hi, lower_at, upper_at);
    RETURN name;
END
$$;
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

DROP TABLE envelope_body;
ALTER TABLE envelope_partition DROP COLUMN bodies_in_rows, DROP COLUMN body_dropped_at;
