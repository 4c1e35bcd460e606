-- An index for selecting envelopes by cause whatever their status (issue 21: `worker replay --cause X` and its
-- dry run without --status, the console's "Replay matching..." on a cause, read every envelope of their window
-- at size: 2.4 s at 10 M). envelope_failed_cause_idx (00191) covers failed envelopes only; a cause is also set
-- on pending envelopes between retries and kept by resolved ones. Partial on last_cause IS NOT NULL: only
-- envelopes whose last attempt failed are in it (a few percent), so it costs ingest nothing (last_cause is
-- NULL on insert) and the worker an entry per failing attempt.
--
-- Built without holding ingest: the index is made ON ONLY the partitioned table, then per partition. A
-- partition made from now on gets it when it is attached (envelope_partition_create), empty. An existing
-- partition gets it now only when the inbox is small (under 1,000,000 envelopes by envelope_count: seconds);
-- on a larger one the partitions stored so far keep reading by the window as before until they are dropped,
-- or an operator builds theirs concurrently (docs/operations.md, "Migrations"). The planner uses each
-- partition's index where it exists.

-- +goose Up
CREATE INDEX envelope_cause_idx ON ONLY envelope (last_cause, id) WHERE last_cause IS NOT NULL;
-- +goose StatementBegin
DO $$
DECLARE
    small boolean := (SELECT coalesce(sum(n), 0) < 1000000 FROM envelope_count
                       WHERE kind IN ('pending', 'done', 'failed', 'ignored', 'resolved'));
    p record;
    ix text;
BEGIN
    FOR p IN SELECT c.oid::regclass AS part, c.relname
               FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
               LEFT JOIN envelope_partition r ON 'envelope_' || r.name = c.relname AND r.dropped_at IS NULL
              WHERE i.inhparent = 'envelope'::regclass AND (small OR r.lower_at > now())
    LOOP
        ix := left(p.relname || '_cause_idx', 63);
        EXECUTE format('CREATE INDEX %I ON %s (last_cause, id) WHERE last_cause IS NOT NULL', ix, p.part);
        EXECUTE format('ALTER INDEX envelope_cause_idx ATTACH PARTITION %I', ix);
    END LOOP;
END
$$;
-- +goose StatementEnd

-- +goose Down
DROP INDEX envelope_cause_idx;
