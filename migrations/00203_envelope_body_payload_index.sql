-- A GIN index (jsonb_path_ops) on every body's parsed payload, per day partition of envelope_body (issue 21: a
-- body search, `worker envelopes list --field/--contains` and the console's search, read every body of its
-- window newest first under a scan budget: a rare value over 24 h took about a second at 10 M envelopes, and a
-- week could not be searched at all). With it, a search reads the matching ids of each indexed partition from
-- the index (admin.List; a value too common for that falls back to the newest-first walk, which finds a page of
-- a common value quickly). Its cost on ingest is in docs/benchmarks.md ("A GIN on every body").
--
-- envelope_body is written once and never updated, so the index costs an insert per body (fastupdate's pending
-- list, merged in batches) and nothing after; it goes with its partition when the day's bodies are dropped.
--
-- Made as envelope_cause_idx (00201): ON ONLY the partitioned table, then per partition. A partition made from
-- now on gets it when it is attached (envelope_partition_create), empty. The migration's transaction holds
-- envelope_body in SHARE mode (CREATE INDEX), so ingest's inserts wait while it runs: an existing partition
-- gets its index now only when the inbox is small (under 100,000 envelopes by envelope_count: a few seconds at
-- most, ~10 s per 200,000 bodies of 1.7 KB on the reference machine); on a larger one the migration builds
-- nothing and the days stored so far are searched by the walk as before until their bodies are dropped, or an
-- operator builds theirs concurrently (docs/operations.md, "Migrations"). A search uses the index
-- of each partition that has one (envelope.PlanScan's BodyIndexed) and whose bodies are all in envelope_body.
--
-- On a small inbox it also unmarks the days 00200 marked bodies_in_rows that hold no body in a row without its
-- copy in envelope_body: 00200 marked the day it ran (today's partition, to come, included) whatever it held,
-- so on a new install the first day was searched (and purged) row by row. A day that holds such a row stays
-- marked; on a larger inbox every mark stays (the check reads the day), until the day passes.

-- +goose Up
CREATE INDEX envelope_body_payload_idx ON ONLY envelope_body USING gin (payload jsonb_path_ops);
-- +goose StatementBegin
DO $$
DECLARE
    small boolean := (SELECT coalesce(sum(n), 0) < 100000 FROM envelope_count
                       WHERE kind IN ('pending', 'done', 'failed', 'ignored', 'resolved'));
    p record;
    ix text;
    held boolean;
BEGIN
    FOR p IN SELECT c.oid::regclass AS part, c.relname
               FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
               LEFT JOIN envelope_partition r ON 'envelope_body_' || r.name = c.relname AND r.dropped_at IS NULL
              WHERE i.inhparent = 'envelope_body'::regclass AND (small OR r.lower_at > now())
    LOOP
        ix := left(p.relname || '_payload_idx', 63);
        EXECUTE format('CREATE INDEX %I ON %s USING gin (payload jsonb_path_ops)', ix, p.part);
        EXECUTE format('ALTER INDEX envelope_body_payload_idx ATTACH PARTITION %I', ix);
    END LOOP;
    IF small THEN
        FOR p IN SELECT r.name FROM envelope_partition r
                  WHERE r.dropped_at IS NULL AND r.bodies_in_rows AND r.lower_id IS NOT NULL
                    AND to_regclass('envelope_body_' || r.name) IS NOT NULL
        LOOP
            EXECUTE format('SELECT EXISTS (SELECT 1 FROM %I e WHERE (e.body IS NOT NULL OR e.payload IS NOT NULL)
                                AND NOT EXISTS (SELECT 1 FROM %I b WHERE b.id = e.id))',
                           'envelope_' || p.name, 'envelope_body_' || p.name) INTO held;
            IF NOT held THEN
                UPDATE envelope_partition SET bodies_in_rows = false WHERE name = p.name;
            END IF;
        END LOOP;
    END IF;
END
$$;
-- +goose StatementEnd

-- +goose Down
-- IF EXISTS: an operator may have dropped it (docs/operations.md). Takes envelope_body in ACCESS EXCLUSIVE mode
-- for the drop (no rewrite).
DROP INDEX IF EXISTS envelope_body_payload_idx;
