-- An envelope's body and parsed payload are stored out of line (in its partition's TOAST table), so the
-- row that ingest inserts and the worker updates is a few hundred bytes instead of ~2 KB (issues 20 and
-- 25: the non-HOT `done` update rewrote the compressed body and payload with the row, WAL included).
--
-- How: each envelope partition is created WITH (toast_tuple_target = 128), the smallest PostgreSQL allows,
-- and every other variable-length column of envelope is STORAGE MAIN (compressed in line if need be,
-- never moved out). A row's body and payload are then the only values the toaster moves out; the rest
-- of the row stays in line. An update that does not change the body (every status change) copies the
-- two 18-byte TOAST pointers, not the bytes.
--
-- Measured (100,000 envelopes of the bench-scale shape, ~1.7 KB bodies, per envelope, two rounds, same
-- figures in both):
--
--   | per envelope        | in line (before) | out of line (this) |
--   |---------------------|------------------|--------------------|
--   | INSERT WAL          | 2,170 B          | 2,427 B (+257 B)   |
--   | `done` UPDATE WAL   | 2,468 B          | 924 B (-1,544 B)   |
--   | `done` UPDATE time  | 34 us            | 19 us              |
--   | heap after `done`   | 3.9 KB (two row versions) | 0.64 KB + 1.56 KB of TOAST |
--   | reading every body  | 0.63-0.66 s      | 0.64-0.68 s        |
--
-- End to end (scripts/bench-budget, 1,000/s for 60 s, ABBA against the previous commit) with the load
-- tool's ~150-byte bodies, the other way round: WAL per envelope 7,681-7,710 B before, 7,777-7,818 B
-- after (+1.3 %: a small body moved out costs a TOAST row and an index entry, and saves its row little);
-- PostgreSQL CPU per envelope 1.09-1.19 ms before, 1.00-1.01 ms after; every run sustained. It saves
-- 1,287 B per envelope at 1.7 KB bodies (above) and costs ~100 B at 150 B; providers' events are mostly
-- larger than 1 KB (a Stripe event carries its whole object).
--
-- Leaving the small columns EXTENDED (toast_tuple_target alone) moved headers and body_sha256 out too:
-- 2,736 B per INSERT. A target of 1,024 B left the payload in line in part: 1,776 B per UPDATE.
--
-- Each out-of-line value takes an OID of the cluster's 32-bit counter (two per envelope). A TOAST table
-- only has to avoid its own values, and a day's (or an hour's) partition holds far fewer than 2^32, so
-- the counter's wrap-around costs nothing here; an unpartitioned table of billions of rows would be the
-- case to avoid. A column added to envelope later must be STORAGE MAIN too, or the toaster moves it out.
--
-- SET STORAGE and toast_tuple_target take SHARE UPDATE EXCLUSIVE locks (ingest and the worker go on)
-- and rewrite nothing: rows stored before keep their layout until they are updated or dropped.

-- +goose Up
-- +goose StatementBegin
DO $$
DECLARE
    r record;
BEGIN
    FOR r IN SELECT a.attname FROM pg_attribute a
              WHERE a.attrelid = 'envelope'::regclass AND a.attnum > 0 AND NOT a.attisdropped
                AND a.attstorage = 'x' AND a.attname NOT IN ('body', 'payload')
    LOOP
        EXECUTE format('ALTER TABLE envelope ALTER COLUMN %I SET STORAGE MAIN', r.attname);
    END LOOP;
    FOR r IN SELECT i.inhrelid::regclass AS part FROM pg_inherits i WHERE i.inhparent = 'envelope'::regclass LOOP
        EXECUTE format('ALTER TABLE %s SET (toast_tuple_target = 128)', r.part);
    END LOOP;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Creates the four partitions of ids stored in [lower_at, upper_at), and registers them.
-- envelope_partitions_ensure creates whole UTC days or hours; a drill or a test may make any
-- range of whole seconds up to a day (named after its start: yyyymmdd, yyyymmddhHH, or
-- yyyymmddhHHMMSS). An envelope partition keeps its body and payload out of line (00199).
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
        -- EXCLUSIVE mode, which does not block ingest or the worker. INCLUDING STORAGE: the
        -- parent's STORAGE MAIN columns.
        EXECUTE format('CREATE TABLE %I (LIKE %I INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING GENERATED INCLUDING STORAGE)%s',
                       t || '_' || name, t, CASE WHEN t = 'envelope' THEN ' WITH (toast_tuple_target = 128)' ELSE '' END);
        EXECUTE format('ALTER TABLE %I ATTACH PARTITION %I FOR VALUES FROM (%s) TO (%s)', t, t || '_' || name, lo, hi);
    END LOOP;
    INSERT INTO envelope_partition (name, lower_id, upper_id, lower_at, upper_at)
    VALUES (name, lo, hi, lower_at, upper_at);
    RETURN name;
END
$$;
-- +goose StatementEnd

-- +goose Down
-- +goose StatementBegin
DO $$
DECLARE
    r record;
BEGIN
    FOR r IN SELECT a.attname FROM pg_attribute a
              WHERE a.attrelid = 'envelope'::regclass AND a.attnum > 0 AND NOT a.attisdropped AND a.attstorage = 'm'
    LOOP
        EXECUTE format('ALTER TABLE envelope ALTER COLUMN %I SET STORAGE EXTENDED', r.attname);
    END LOOP;
    FOR r IN SELECT i.inhrelid::regclass AS part FROM pg_inherits i WHERE i.inhparent = 'envelope'::regclass LOOP
        EXECUTE format('ALTER TABLE %s RESET (toast_tuple_target)', r.part);
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
-- +goose StatementEnd
