-- Envelopes partitioned by time, dedup through a key table, retention by dropping partitions
-- (issue 20; docs/storage.md says why each choice, with the measurements).
--
-- Ids. An envelope id is now time-ordered: (seconds since 2020-01-01 UTC) << 20 | a 20-bit
-- sequence (envelope_next_id()), so an id says when its envelope was stored (envelope_id_time())
-- and a time says which ids (envelope_id_at()). Ids stay below 2^53 (JSON and JavaScript read them
-- exactly) until 2088, and two ids collide only past 1,048,576 envelopes stored in one second.
--
-- envelope is partitioned by RANGE (id), one partition per day (or hour: the worker's
-- --partition-width), so it is partitioned by the time each envelope was stored while a lookup
-- by id (the worker's, the admin's, every foreign row's) prunes to one partition and the primary
-- key stays (id). envelope_attempt, envelope_duplicate and envelope_conflict are partitioned by
-- RANGE (envelope_id) on the same bounds: a day's envelopes and everything recorded about them
-- live in the day's four partitions and leave together (envelope_partition_drop()).
--
-- Dedup. A partitioned table cannot hold a unique index without its partition key, so
-- (source, delivery_id) is unique in envelope_key, a narrow table (~90 B a row) hash-partitioned
-- on the delivery id, one row per delivery id in the tombstone window: insert takes the key in
-- the same statement that stores the envelope (ON CONFLICT waits for a concurrent inserter of
-- the same key, as before). A key is live while its envelope's partition is: once that was
-- dropped, the next delivery of that id takes the key over (ON CONFLICT ... DO UPDATE WHERE the
-- key's envelope id is below every live partition's), and envelope_key_sweep() deletes such keys
-- in the background. So the
-- tombstone window is --purge-delete-after, as before, whatever the order the two happen in.
--
-- The upgrade. A database that holds envelopes keeps them: each of the four tables is renamed
-- *_legacy and attached as the partition of all ids below today's first (its rows are checked
-- once: a scan of each), and envelope_key is filled from it. Writers wait meanwhile (the LOCK
-- below): 6.9 s for 1 M envelopes and their attempts on 2 cores; ingest answers 503 after its store
-- deadline, and providers retry (docs/operations.md, "Upgrading to partitioned envelopes").
-- The legacy partition is dropped like any other once its newest row is past the window.
-- A fresh database (no envelope yet) has no legacy partition.
--
-- Ledger. ledger_transaction keeps its envelope's source and delivery id (filled by a trigger from
-- the envelope, which must exist: it replaces the foreign key), so a posting stays traceable to
-- its delivery after the envelope's partition is dropped.

-- +goose Up
LOCK TABLE envelope, envelope_attempt, envelope_duplicate, envelope_conflict, envelope_replay,
    ledger_transaction, envelope_count IN ACCESS EXCLUSIVE MODE;

-- +goose StatementBegin
CREATE FUNCTION envelope_id_at(ts timestamptz) RETURNS bigint
    LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT (floor(extract(epoch FROM ts))::bigint - 1577836800) << 20
$$;
-- +goose StatementEnd
COMMENT ON FUNCTION envelope_id_at(timestamptz) IS
    'The smallest envelope id stored at ts or later (ids of envelopes stored before the partitioned layout are smaller than any)';
-- +goose StatementBegin
CREATE FUNCTION envelope_id_time(id bigint) RETURNS timestamptz
    LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN id >= envelope_id_at('2024-01-01 00:00:00+00') THEN to_timestamp((id >> 20) + 1577836800) END
$$;
-- +goose StatementEnd
COMMENT ON FUNCTION envelope_id_time(bigint) IS
    'When envelope id was stored, to the second (NULL for an id from before the partitioned layout)';

-- Views are rebound to the new tables at the end: keep their definitions as they read now.
CREATE TEMP TABLE _views ON COMMIT DROP AS
SELECT c.oid, c.relname, pg_get_viewdef(c.oid) AS def
  FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE n.nspname = 'public' AND c.relkind = 'v';

-- +goose StatementBegin
CREATE FUNCTION pg_temp.copy_grants(src regclass, dst regclass) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    r record;
BEGIN
    FOR r IN SELECT a.privilege_type, g.rolname
               FROM pg_class c, aclexplode(c.relacl) a JOIN pg_roles g ON g.oid = a.grantee
              WHERE c.oid = src AND a.grantee <> c.relowner LOOP
        EXECUTE format('GRANT %s ON %s TO %I', r.privilege_type, dst, r.rolname);
    END LOOP;
    FOR r IN SELECT t.attname, a.privilege_type, g.rolname
               FROM pg_attribute t, aclexplode(t.attacl) a JOIN pg_roles g ON g.oid = a.grantee
              WHERE t.attrelid = src AND t.attacl IS NOT NULL AND NOT t.attisdropped LOOP
        EXECUTE format('GRANT %s (%I) ON %s TO %I', r.privilege_type, r.attname, dst, r.rolname);
    END LOOP;
END
$$;
-- +goose StatementEnd

-- The count triggers move to the partitioned tables (a partition cannot carry them).
DROP TRIGGER envelope_count_insert ON envelope;
DROP TRIGGER envelope_count_update ON envelope;
DROP TRIGGER envelope_count_delete ON envelope;
DROP TRIGGER envelope_count_truncate ON envelope;
DROP TRIGGER envelope_count_insert ON envelope_duplicate;
DROP TRIGGER envelope_count_delete ON envelope_duplicate;
DROP TRIGGER envelope_count_truncate ON envelope_duplicate;
DROP TRIGGER envelope_count_insert ON envelope_conflict;
DROP TRIGGER envelope_count_update ON envelope_conflict;
DROP TRIGGER envelope_count_delete ON envelope_conflict;
DROP TRIGGER envelope_count_truncate ON envelope_conflict;

-- Foreign keys into envelope go: a partition must be droppable without a scan of what refers to it.
ALTER TABLE envelope_attempt DROP CONSTRAINT envelope_attempt_envelope_id_fkey;
ALTER TABLE envelope_duplicate DROP CONSTRAINT envelope_duplicate_envelope_id_fkey;
ALTER TABLE envelope_conflict DROP CONSTRAINT envelope_conflict_envelope_id_fkey;
ALTER TABLE envelope_replay DROP CONSTRAINT envelope_replay_envelope_id_fkey;
ALTER TABLE ledger_transaction DROP CONSTRAINT ledger_transaction_envelope_id_fkey;
ALTER TABLE envelope DROP CONSTRAINT envelope_source_delivery_id_key;

-- Rename the four tables, their indexes and their identity sequences out of the way.
-- +goose StatementBegin
DO $$
DECLARE
    t text;
    i text;
BEGIN
    FOREACH t IN ARRAY ARRAY['envelope', 'envelope_attempt', 'envelope_duplicate', 'envelope_conflict'] LOOP
        EXECUTE format('ALTER TABLE %I RENAME TO %I', t, t || '_legacy');
        FOR i IN SELECT c.relname FROM pg_index x JOIN pg_class c ON c.oid = x.indexrelid
                  WHERE x.indrelid = (t || '_legacy')::regclass LOOP
            EXECUTE format('ALTER INDEX %I RENAME TO %I', i, left('legacy_' || i, 63));
        END LOOP;
        EXECUTE format('CREATE SEQUENCE %I AS bigint', t || '_id_seq_new');
        PERFORM pg_temp.copy_grants((t || '_id_seq')::regclass, (t || '_id_seq_new')::regclass);
        IF t <> 'envelope' THEN
            -- the new rows' ids go on from the old ones'
            EXECUTE format('SELECT setval(%L, greatest((SELECT last_value FROM %I), 1))', t || '_id_seq_new', t || '_id_seq');
        END IF;
        EXECUTE format('ALTER TABLE %I ALTER COLUMN id DROP IDENTITY', t || '_legacy');
        EXECUTE format('ALTER SEQUENCE %I RENAME TO %I', t || '_id_seq_new', t || '_id_seq');
    END LOOP;
END
$$;
-- +goose StatementEnd

CREATE TABLE envelope (LIKE envelope_legacy INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING GENERATED INCLUDING COMMENTS)
    PARTITION BY RANGE (id);
CREATE TABLE envelope_attempt (LIKE envelope_attempt_legacy INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING GENERATED INCLUDING COMMENTS)
    PARTITION BY RANGE (envelope_id);
CREATE TABLE envelope_duplicate (LIKE envelope_duplicate_legacy INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING GENERATED INCLUDING COMMENTS)
    PARTITION BY RANGE (envelope_id);
CREATE TABLE envelope_conflict (LIKE envelope_conflict_legacy INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING GENERATED INCLUDING COMMENTS)
    PARTITION BY RANGE (envelope_id);
ALTER SEQUENCE envelope_id_seq OWNED BY envelope.id;
ALTER SEQUENCE envelope_attempt_id_seq OWNED BY envelope_attempt.id;
ALTER SEQUENCE envelope_duplicate_id_seq OWNED BY envelope_duplicate.id;
ALTER SEQUENCE envelope_conflict_id_seq OWNED BY envelope_conflict.id;

-- +goose StatementBegin
CREATE FUNCTION envelope_next_id() RETURNS bigint
    LANGUAGE sql VOLATILE AS $$
    SELECT envelope_id_at(now()) | (nextval('envelope_id_seq') & 1048575)
$$;
-- +goose StatementEnd
COMMENT ON FUNCTION envelope_next_id() IS
    'A new envelope id: the transaction''s start second << 20 | 20 bits of envelope_id_seq';
ALTER TABLE envelope ALTER COLUMN id SET DEFAULT envelope_next_id();
ALTER TABLE envelope_attempt ALTER COLUMN id SET DEFAULT nextval('envelope_attempt_id_seq');
ALTER TABLE envelope_duplicate ALTER COLUMN id SET DEFAULT nextval('envelope_duplicate_id_seq');
ALTER TABLE envelope_conflict ALTER COLUMN id SET DEFAULT nextval('envelope_conflict_id_seq');

ALTER TABLE envelope ADD PRIMARY KEY (id);
ALTER TABLE envelope ADD CONSTRAINT envelope_backfill_run_id_fkey FOREIGN KEY (backfill_run_id) REFERENCES backfill_run (id);
CREATE INDEX envelope_backfill_run_id_idx ON envelope (backfill_run_id) WHERE backfill_run_id IS NOT NULL;
CREATE INDEX envelope_body_kept_processed_at_idx ON envelope (processed_at, id)
    WHERE status IN ('done', 'ignored') AND body_purged_at IS NULL;
CREATE INDEX envelope_event_type_idx ON envelope (source, event_type);
CREATE INDEX envelope_failed_payload_idx ON envelope USING gin (payload jsonb_path_ops) WHERE status = 'failed';
CREATE INDEX envelope_final_processed_at_idx ON envelope (processed_at, id) WHERE status IN ('done', 'ignored');
CREATE INDEX envelope_received_at_idx ON envelope (received_at);
CREATE INDEX envelope_shopify_event_idx ON envelope (source, (headers ->> 'X-Shopify-Event-Id'), id) WHERE provider = 'shopify';
CREATE INDEX envelope_status_received_at_idx ON envelope (status, received_at);
CREATE INDEX envelope_attempt_envelope_id_idx ON envelope_attempt (envelope_id, id);
CREATE INDEX envelope_attempt_failure_idx ON envelope_attempt (finished_at) INCLUDE (cause, envelope_id)
    WHERE outcome IN ('failed', 'retry');
CREATE INDEX envelope_duplicate_envelope_id_idx ON envelope_duplicate (envelope_id, received_at);
CREATE INDEX envelope_conflict_envelope_id_idx ON envelope_conflict (envelope_id);

SELECT pg_temp.copy_grants('envelope_legacy', 'envelope');
SELECT pg_temp.copy_grants('envelope_attempt_legacy', 'envelope_attempt');
SELECT pg_temp.copy_grants('envelope_duplicate_legacy', 'envelope_duplicate');
SELECT pg_temp.copy_grants('envelope_conflict_legacy', 'envelope_conflict');

-- The partitions, one row per time range; dropped ones stay, with what they held.
CREATE TABLE envelope_partition (
    name              text        NOT NULL CHECK (name ~ '^(legacy|[0-9]{8}(h[0-9]{2}([0-9]{4})?)?)$'),
    lower_id          bigint,                 -- NULL: every id below upper_id (the legacy partition)
    upper_id          bigint      NOT NULL,
    lower_at          timestamptz,
    upper_at          timestamptz NOT NULL,
    created_at        timestamptz NOT NULL DEFAULT now(),
    dropped_at        timestamptz,
    dropped_envelopes bigint,
    CHECK (lower_id IS NULL OR lower_id < upper_id),
    PRIMARY KEY (name, created_at)
);
-- A live partition's name is its tables' suffix; a range dropped and made again reuses it.
CREATE UNIQUE INDEX envelope_partition_live_name ON envelope_partition (name) WHERE dropped_at IS NULL;
COMMENT ON TABLE envelope_partition IS
    'The partitions of envelope (and of envelope_attempt, envelope_duplicate, envelope_conflict on the same ids): envelope_<name> holds ids in [lower_id, upper_id), stored in [lower_at, upper_at); a dropped one keeps its row with dropped_at and dropped_envelopes';

-- +goose StatementBegin
-- Creates the four partitions of ids stored in [lower_at, upper_at), and registers them.
-- envelope_partitions_ensure creates whole UTC days or hours; a drill or a test may make any
-- range of whole seconds up to a day (named after its start: yyyymmdd, yyyymmddhHH, or
-- yyyymmddhHHMMSS).
CREATE FUNCTION envelope_partition_create(lower_at timestamptz, upper_at timestamptz) RETURNS text
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
-- Creates the partitions missing from the newest one's end (or from now) until now + ahead, each
-- width wide (1 hour or 1 day; a change of width applies from the next partition; NULL: as wide
-- as the newest one, or a day), and returns how many it created. One caller at a time; the others
-- wait and find nothing left to create.
CREATE FUNCTION envelope_partitions_ensure(ahead interval, width interval DEFAULT NULL) RETURNS integer
    LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
    origin constant timestamptz := '2000-01-01 00:00:00+00';
    s timestamptz;
    e timestamptz;
    n integer := 0;
BEGIN
    IF width IS NULL THEN
        SELECT CASE WHEN p.upper_at - p.lower_at < interval '1 day' THEN interval '1 hour' ELSE interval '1 day' END INTO width
          FROM envelope_partition p WHERE p.lower_at IS NOT NULL AND p.dropped_at IS NULL ORDER BY p.upper_at DESC LIMIT 1;
        width := coalesce(width, interval '1 day');
    END IF;
    IF width NOT IN (interval '1 hour', interval '1 day') THEN
        RAISE EXCEPTION 'envelope partition width %: must be 1 hour or 1 day', width USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF ahead < interval '0' OR ahead > interval '60 days' THEN
        RAISE EXCEPTION 'envelope partitions ahead %: must be between 0 and 60 days', ahead USING ERRCODE = 'invalid_parameter_value';
    END IF;
    PERFORM pg_advisory_xact_lock(7305733214712620181);
    SELECT max(p.upper_at) INTO s FROM envelope_partition p WHERE p.dropped_at IS NULL;
    s := coalesce(s, date_bin(width, now(), origin));
    WHILE s < now() + ahead LOOP
        e := date_bin(width, s, origin) + width;
        PERFORM envelope_partition_create(s, e);
        s := e;
        n := n + 1;
    END LOOP;
    RETURN n;
END
$$;
-- +goose StatementEnd



-- +goose StatementBegin
-- The smallest envelope id a live partition holds (with none live, the newest one's end): a key
-- whose envelope id is below it is past the tombstone window, its partition dropped. Ingest's
-- takeover, Store.Stored and the sweep all decide a key's life by it.
CREATE FUNCTION envelope_id_floor() RETURNS bigint
    LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT coalesce(min(coalesce(p.lower_id, -9223372036854775808)), (SELECT max(q.upper_id) FROM envelope_partition q))
      FROM envelope_partition p WHERE p.dropped_at IS NULL
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Deletes up to lim keys whose envelope's partition was dropped, and returns how many.
CREATE FUNCTION envelope_key_sweep(lim integer) RETURNS bigint
    LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
    floor_id bigint := envelope_id_floor();
    n bigint;
BEGIN
    WITH gone AS (
        DELETE FROM envelope_key k
         WHERE (k.delivery_id, k.source) IN (SELECT x.delivery_id, x.source FROM envelope_key x WHERE x.envelope_id < floor_id LIMIT lim)
           AND k.envelope_id < floor_id
        RETURNING 1
    )
    SELECT count(*) INTO n FROM gone;
    RETURN n;
END
$$;
-- +goose StatementEnd

-- Counts by when their envelopes were stored (bucket: the second of the envelope id, id >> 20;
-- small numbers for ids from before this layout), so a partition's counts are the rows whose
-- bucket lies in its seconds, and dropping it drops them. The triggers write a delta per second;
-- compaction folds each partition's into one row (at the partition's first second).
ALTER TABLE envelope_count ADD COLUMN bucket integer NOT NULL DEFAULT 0;
ALTER TABLE envelope_count ALTER COLUMN bucket DROP DEFAULT;
-- +goose StatementBegin
CREATE FUNCTION envelope_count_bucket(id bigint) RETURNS integer
    LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT (id >> 20)::integer
$$;
-- +goose StatementEnd
-- +goose StatementBegin
-- The buckets of the partition of ids [lower_id, upper_id) (lower_id NULL: every smaller id): its counts
-- are the envelope_count rows whose bucket lies in it.
CREATE FUNCTION envelope_count_range(lower_id bigint, upper_id bigint) RETURNS int4range
    LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT int4range(envelope_count_bucket(lower_id), envelope_count_bucket(upper_id))
$$;
-- +goose StatementEnd

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
        PERFORM pg_advisory_xact_lock(7305733214712620180); -- after any compaction in flight
        DELETE FROM envelope_count WHERE kind IN ('pending', 'done', 'failed', 'ignored');
    END IF;
    RETURN NULL;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION envelope_count_duplicate() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
BEGIN
    -- envelope_duplicate has no source: its envelope's (in the same range of ids, so dropped with it).
    IF TG_OP = 'TRUNCATE' THEN
        PERFORM pg_advisory_xact_lock(7305733214712620180);
        DELETE FROM envelope_count WHERE kind = 'duplicate';
    ELSIF TG_OP = 'INSERT' THEN
        INSERT INTO envelope_count (source, kind, bucket, n)
        SELECT e.source, 'duplicate', envelope_count_bucket(e.id), count(*) FROM new_rows x JOIN envelope e ON e.id = x.envelope_id GROUP BY 1, 3;
    ELSE
        INSERT INTO envelope_count (source, kind, bucket, n)
        SELECT e.source, 'duplicate', envelope_count_bucket(e.id), -count(*) FROM old_rows x JOIN envelope e ON e.id = x.envelope_id GROUP BY 1, 3;
    END IF;
    RETURN NULL;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION envelope_count_conflict() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
BEGIN
    IF TG_OP = 'TRUNCATE' THEN
        PERFORM pg_advisory_xact_lock(7305733214712620180);
        DELETE FROM envelope_count WHERE kind = 'conflict';
    ELSIF TG_OP = 'INSERT' THEN
        INSERT INTO envelope_count (source, kind, bucket, n)
        SELECT source, 'conflict', envelope_count_bucket(envelope_id), sum(repeats) FROM new_rows GROUP BY 1, 3;
    ELSIF TG_OP = 'UPDATE' THEN
        INSERT INTO envelope_count (source, kind, bucket, n)
        SELECT source, 'conflict', b, sum(d)
          FROM (SELECT source, envelope_count_bucket(envelope_id) AS b, repeats AS d FROM new_rows
                UNION ALL
                SELECT source, envelope_count_bucket(envelope_id), -repeats FROM old_rows) x
         GROUP BY 1, 3
        HAVING sum(d) <> 0;
    ELSE
        INSERT INTO envelope_count (source, kind, bucket, n)
        SELECT source, 'conflict', envelope_count_bucket(envelope_id), -sum(repeats) FROM old_rows GROUP BY 1, 3;
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
        -- each partition's deltas onto its first second (legacy: the smallest)
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
CREATE TRIGGER envelope_count_update AFTER UPDATE ON envelope_conflict
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION envelope_count_conflict();
CREATE TRIGGER envelope_count_delete AFTER DELETE ON envelope_conflict
    REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION envelope_count_conflict();
CREATE TRIGGER envelope_count_truncate AFTER TRUNCATE ON envelope_conflict
    FOR EACH STATEMENT EXECUTE FUNCTION envelope_count_conflict();

-- +goose StatementBegin
-- Drops partition envelope_<part> (and its attempts', duplicates' and conflicts' partitions), its
-- counts, its envelopes' replay records and returns 'dropped' with how many envelopes went; or,
-- changing nothing, 'held' when it still holds pending envelopes (work not done is never dropped).
-- Only the oldest live partition, and only one that ends at or before cutoff. Waits at most
-- lock_wait for the lock on the tables (the DETACH needs them to itself for a moment; it fails
-- rather than queue ingest behind a long transaction), so call it again later on lock_not_available.
CREATE FUNCTION envelope_partition_drop(part text, cutoff timestamptz, lock_wait interval DEFAULT interval '500 milliseconds')
    RETURNS TABLE (outcome text, envelopes bigint)
    LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
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
$$;
-- +goose StatementEnd

-- Ledger postings keep their delivery.
ALTER TABLE ledger_transaction ADD COLUMN source text, ADD COLUMN delivery_id text;
COMMENT ON COLUMN ledger_transaction.source IS 'the source of the envelope that posted it (kept after the envelope is dropped)';
COMMENT ON COLUMN ledger_transaction.delivery_id IS 'the delivery id of the envelope that posted it (kept after the envelope is dropped)';
-- +goose StatementBegin
CREATE FUNCTION ledger_transaction_delivery() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
BEGIN
    SELECT e.source, e.delivery_id INTO NEW.source, NEW.delivery_id FROM envelope e WHERE e.id = NEW.envelope_id;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'ledger transaction %: envelope % does not exist', NEW.idempotency_key, NEW.envelope_id
            USING ERRCODE = 'foreign_key_violation';
    END IF;
    RETURN NEW;
END
$$;
-- +goose StatementEnd
CREATE TRIGGER ledger_transaction_delivery BEFORE INSERT ON ledger_transaction
    FOR EACH ROW EXECUTE FUNCTION ledger_transaction_delivery();
ALTER TABLE ledger_transaction ADD CONSTRAINT ledger_transaction_delivery_known CHECK (source IS NOT NULL AND delivery_id IS NOT NULL) NOT VALID;

-- Rebind the views to the new tables (CREATE OR REPLACE keeps their grants).
-- +goose StatementBegin
DO $$
DECLARE
    v record;
BEGIN
    FOR v IN SELECT * FROM _views ORDER BY oid LOOP
        EXECUTE format('CREATE OR REPLACE VIEW %I AS %s', v.relname, v.def);
    END LOOP;
END
$$;
-- +goose StatementEnd

-- The ledger's audit views read the delivery from the posting, the rest from the envelope while
-- it exists.
-- +goose StatementBegin
DO $$
DECLARE
    v text;
    def text;
BEGIN
    FOREACH v IN ARRAY ARRAY['ledger_payment_audit', 'ledger_transaction_audit'] LOOP
        def := pg_get_viewdef(v::regclass);
        IF def NOT LIKE '%JOIN envelope e ON ((e.id = %.envelope_id))%' THEN
            RAISE EXCEPTION 'view %: unexpected definition %', v, def;
        END IF;
        def := replace(def, 'JOIN envelope e ON ((e.id = ', 'LEFT JOIN envelope e ON ((e.id = ');
        def := replace(def, 'e.source,', 'COALESCE(e.source, ' || CASE v WHEN 'ledger_payment_audit' THEN 'p' ELSE 't' END || '.source) AS source,');
        def := replace(def, 'e.delivery_id,', 'COALESCE(e.delivery_id, ' || CASE v WHEN 'ledger_payment_audit' THEN 'p' ELSE 't' END || '.delivery_id) AS delivery_id,');
        EXECUTE format('CREATE OR REPLACE VIEW %I AS %s', v, def);
    END LOOP;
END
$$;
-- +goose StatementEnd

-- Attach what the tables held as the legacy partition, or drop the empty tables.
-- +goose StatementBegin
DO $$
DECLARE
    bound bigint := envelope_id_at(date_trunc('hour', now()));
    t text;
    legacy_max bigint;
BEGIN
    SELECT max(id) INTO legacy_max FROM envelope_legacy;
    IF legacy_max IS NULL THEN
        DROP TABLE envelope_attempt_legacy, envelope_duplicate_legacy, envelope_conflict_legacy, envelope_legacy;
        RETURN;
    END IF;
    IF legacy_max >= bound THEN
        RAISE EXCEPTION 'envelope id % is not below the partitioned layout''s first id %', legacy_max, bound;
    END IF;
    FOREACH t IN ARRAY ARRAY['envelope', 'envelope_attempt', 'envelope_duplicate', 'envelope_conflict'] LOOP
        EXECUTE format('ALTER TABLE %I ATTACH PARTITION %I FOR VALUES FROM (MINVALUE) TO (%s)', t, t || '_legacy', bound);
    END LOOP;
    INSERT INTO envelope_partition (name, lower_id, upper_id, lower_at, upper_at)
    VALUES ('legacy', NULL, bound, (SELECT min(received_at) FROM envelope_legacy), date_trunc('hour', now()));
END
$$;
-- +goose StatementEnd
SELECT envelope_partitions_ensure(interval '3 days');

-- The dedup keys, filled from the legacy partition.
CREATE TABLE envelope_key (
    delivery_id text   NOT NULL,
    source      text   NOT NULL,
    envelope_id bigint NOT NULL,
    PRIMARY KEY (delivery_id, source)
) PARTITION BY HASH (delivery_id, source);
COMMENT ON TABLE envelope_key IS
    'One row per (source, delivery_id) in the tombstone window: its envelope. A key whose envelope is gone (its partition dropped) is taken over by the next delivery of the id, and swept by envelope_key_sweep()';
-- +goose StatementBegin
DO $$
BEGIN
    FOR r IN 0..7 LOOP
        EXECUTE format('CREATE TABLE envelope_key_h%s PARTITION OF envelope_key FOR VALUES WITH (MODULUS 8, REMAINDER %s)', r, r);
    END LOOP;
END
$$;
-- +goose StatementEnd
CREATE INDEX envelope_key_envelope_id_idx ON envelope_key (envelope_id);
INSERT INTO envelope_key (delivery_id, source, envelope_id) SELECT delivery_id, source, id FROM envelope;

-- Postings made before keep their delivery too.
ALTER TABLE ledger_transaction DISABLE TRIGGER ledger_transaction_append_only;
UPDATE ledger_transaction t SET source = e.source, delivery_id = e.delivery_id FROM envelope e WHERE e.id = t.envelope_id;
ALTER TABLE ledger_transaction ENABLE TRIGGER ledger_transaction_append_only;
ALTER TABLE ledger_transaction VALIDATE CONSTRAINT ledger_transaction_delivery_known;

-- Grants of what is new. Ingest takes keys and ids; the worker keeps partitions and sweeps keys
-- (SECURITY DEFINER functions: only the owner has DDL); the admin reads.
GRANT SELECT, INSERT, UPDATE (envelope_id) ON envelope_key TO inbox_ingest, inbox_worker, inbox_admin;
GRANT SELECT ON envelope_key TO inbox_worker, inbox_admin;
GRANT SELECT ON envelope_partition TO inbox_ingest, inbox_worker, inbox_admin;
GRANT EXECUTE ON FUNCTION envelope_next_id() TO inbox_ingest, inbox_worker, inbox_admin;
REVOKE ALL ON FUNCTION envelope_partition_create(timestamptz, timestamptz), envelope_partitions_ensure(interval, interval),
    envelope_partition_drop(text, timestamptz, interval), envelope_key_sweep(integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION envelope_partitions_ensure(interval, interval), envelope_partition_drop(text, timestamptz, interval),
    envelope_key_sweep(integer) TO inbox_worker, inbox_admin;
-- ingest keeps partitions ahead too (at the newest one's width), so it never lacks one to store
-- into while the worker is down.
GRANT EXECUTE ON FUNCTION envelope_partitions_ensure(interval, interval) TO inbox_ingest;

-- +goose Down
-- +goose StatementBegin
DO $$
BEGIN
    RAISE EXCEPTION 'migration 00190 (partitioned envelopes) has no automatic down: see docs/operations.md, "Rolling back the partitioned layout"';
END
$$;
-- +goose StatementEnd
