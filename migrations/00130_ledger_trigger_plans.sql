-- The ledger's deferred balance checks look up entries by transaction id, which has an index.
-- PL/pgSQL caches their plans for the life of a session: a worker that connects while
-- ledger_entry is still small (a fresh database, before autovacuum's first ANALYZE) plans a
-- sequential scan and keeps it, so every posting's commit scans the whole table (measured:
-- 1.5 ms per check at 10,000 entries, the largest cost of processing a payment). Planning them
-- with sequential scans off makes them use the index whatever the statistics say.

-- +goose Up
ALTER FUNCTION ledger_check_balanced() SET enable_seqscan = off;
ALTER FUNCTION ledger_check_has_entries() SET enable_seqscan = off;

-- +goose Down
ALTER FUNCTION ledger_check_balanced() RESET enable_seqscan;
ALTER FUNCTION ledger_check_has_entries() RESET enable_seqscan;
