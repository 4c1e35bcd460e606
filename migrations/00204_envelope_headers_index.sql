-- A GIN index (jsonb_path_ops) on the headers ingest keeps, per day partition of envelope (issue 21: a header
-- search, `worker envelopes list --header Name=value` and the console's, read every envelope of its window
-- newest first under the scan budget, and stopped at it after ~370,000 envelopes at 10 M; the cookbook's
-- header query read every row). With it, a search reads the matching ids of each indexed partition from the
-- index, as a body search reads envelope_body_payload_idx (00203), and a value too common for that is walked.
-- The index is on the headers lowercased (jsonb's own text through lower(), parsed again): a header search
-- matches names in any case (ingest keeps canonical names, X-Github-Event, and a search may say
-- x-github-event), so the index gives a superset, and each candidate is checked by the search's own condition.
-- That holds while a row's names are unique once lowercased, which ingest's canonical names are: two names of a
-- row that differ only in case would keep one value in the index's document.
--
-- Its cost: headers are a handful of values (the provider's delivery id, event, topic, shop, user agent), but
-- the index is on envelope, whose rows the worker updates (done, failed) with a status change, which no HOT
-- update can carry: each row gets its index entries twice. Measured end to end: about 480 B more WAL per
-- envelope (1.04-1.06x), CPU within the spread (docs/benchmarks.md, "A GIN on the headers, and keyed lists, at
-- 10 M"). The headers stay in the row when a day's bodies are dropped, so the index serves a day for as
-- long as its envelopes are kept, whatever the body retention.
--
-- Made as envelope_cause_idx (00201) and envelope_body_payload_idx (00203): ON ONLY the partitioned table, then
-- per partition. A partition made from now on gets it when it is attached (envelope_partition_create), empty.
-- The migration's transaction holds envelope in SHARE mode (CREATE INDEX), so ingest waits while it runs: an
-- existing partition gets its index now only when the inbox is small (under 100,000 envelopes by
-- envelope_count); on a larger one the days stored so far are searched by the walk as before until they are
-- dropped, or an operator builds theirs concurrently (docs/operations.md, "Migrations"). A search uses the
-- index of each partition that has one (envelope.PlanScan's HeadersIndexed).

-- +goose Up
CREATE INDEX envelope_headers_idx ON ONLY envelope USING gin ((lower(headers::text)::jsonb) jsonb_path_ops);
-- +goose StatementBegin
DO $$
DECLARE
    small boolean := (SELECT coalesce(sum(n), 0) < 100000 FROM envelope_count
                       WHERE kind IN ('pending', 'done', 'failed', 'ignored', 'resolved'));
    p record;
    ix text;
BEGIN
    FOR p IN SELECT c.oid::regclass AS part, c.relname
               FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
               LEFT JOIN envelope_partition r ON 'envelope_' || r.name = c.relname AND r.dropped_at IS NULL
              WHERE i.inhparent = 'envelope'::regclass AND (small OR r.lower_at > now())
    LOOP
        ix := left(p.relname || '_headers_idx', 63);
        EXECUTE format('CREATE INDEX %I ON %s USING gin ((lower(headers::text)::jsonb) jsonb_path_ops)', ix, p.part);
        EXECUTE format('ALTER INDEX envelope_headers_idx ATTACH PARTITION %I', ix);
    END LOOP;
END
$$;
-- +goose StatementEnd

-- +goose Down
-- IF EXISTS: an operator may have dropped it (docs/operations.md).
DROP INDEX IF EXISTS envelope_headers_idx;
