-- A posting's delivery (ledger_transaction.source, delivery_id) is checked, not looked up through the
-- partitioned envelope table, and its statement is planned once per connection.
--
-- The trigger of migration 00190 looked each posting's envelope up by id in envelope. PostgreSQL planned
-- that statement anew for every posting (its generic plan, over every partition, looked dearer than a
-- plan for the one id), and the planning grows with the partitions retention keeps. Measured with
-- scripts/bench-budget (1,000 deliveries/s for 60 s, pg_stat_statements with track_planning): 19.7 s of
-- planning for 60,000 postings with 4 envelope partitions, 23-24 s with 94 (90 days of daily partitions,
-- the default retention): 0.33-0.39 ms a posting, against 0.02 ms of execution. Those are wall-clock
-- times on a machine whose four processes share two cores; the cluster's CPU per envelope moved by
-- about 3 % (1.10 vs 1.14 ms, within the machine's noise), so the gain is mostly that the cost no longer
-- grows with the partitions kept.
--
-- Now the worker passes the envelope's source and delivery id with the posting (it has the envelope
-- locked in the same transaction), and the trigger checks them against envelope_key, the narrow
-- hash-partitioned key table (the key maps the delivery to this envelope while the envelope's
-- partition is live), with a generic plan made once per connection (plan_cache_mode): 0.02-0.05 s of
-- planning for the same 60,000. A posting that names none, or names another delivery than its
-- envelope's, is looked up as before, and the envelope's own values win: what a posting records is
-- always its envelope's.

-- +goose Up
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION ledger_transaction_delivery() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp SET plan_cache_mode = force_generic_plan AS $$
BEGIN
    IF NEW.source IS NOT NULL AND NEW.delivery_id IS NOT NULL AND EXISTS (
        SELECT 1 FROM envelope_key k
         WHERE k.delivery_id = NEW.delivery_id AND k.source = NEW.source AND k.envelope_id = NEW.envelope_id) THEN
        RETURN NEW;
    END IF;
    SELECT e.source, e.delivery_id INTO NEW.source, NEW.delivery_id FROM envelope e WHERE e.id = NEW.envelope_id;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'ledger transaction %: envelope % does not exist', NEW.idempotency_key, NEW.envelope_id
            USING ERRCODE = 'foreign_key_violation';
    END IF;
    RETURN NEW;
END
$$;
-- +goose StatementEnd

-- +goose Down
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION ledger_transaction_delivery() RETURNS trigger
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
