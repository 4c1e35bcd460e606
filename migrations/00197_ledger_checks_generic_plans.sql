-- The ledger's deferred checks (ledger_check_balanced, once per entry; ledger_check_has_entries, once per
-- transaction) use one generic plan per connection instead of being planned again on some connections for
-- every call.
--
-- PostgreSQL picks, per connection, between a plan made for each call's values and a generic one, from the
-- first five calls. On some of the worker's connections it kept planning the balance check every call:
-- scripts/bench-budget at 1,400 deliveries/s measured 7.0 s of planning for 167,984 calls (42 us each, wall
-- clock on two busy cores) in one run and 0.09 s in another. The checks' statements read ledger_entry by
-- transaction_id, whatever the value: the generic plan is the one plan they need (migration 00130 already
-- turned sequential scans off for them).

-- +goose Up
ALTER FUNCTION ledger_check_balanced() SET plan_cache_mode = force_generic_plan;
ALTER FUNCTION ledger_check_has_entries() SET plan_cache_mode = force_generic_plan;

-- +goose Down
ALTER FUNCTION ledger_check_balanced() RESET plan_cache_mode;
ALTER FUNCTION ledger_check_has_entries() RESET plan_cache_mode;
