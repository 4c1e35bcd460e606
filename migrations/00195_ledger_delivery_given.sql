-- A posting's delivery (ledger_transaction.source, delivery_id) costs the same whatever the number of
-- envelope partitions kept.
--
-- The trigger of migration 00190 looked each posting's envelope up by id in the partitioned envelope table.
-- In a PL/pgSQL function that query runs a cached generic plan, and PostgreSQL 15 locks every partition
-- (and each of its indexes) of a generic plan at each execution, before runtime pruning: the cost grew
-- with the partitions retention keeps. Measured on this project's machine, one batch of 60 deferred
-- payments (the worker's flush): the trigger took 6 ms with 4 envelope partitions and 63-81 ms with 61
-- (90 days of daily partitions is the default retention), 1.1-1.4 ms per posting, more than the rest of
-- the posting together.
--
-- Now the worker passes the envelope's source and delivery id with the posting (it has the envelope
-- locked in the same transaction), and the trigger checks them against envelope_key, the narrow
-- hash-partitioned key table (one probe of one of its 8 partitions; the key maps the delivery to this
-- envelope while the envelope's partition is live). A posting that names none, or names another
-- delivery than its envelope's, is looked up as before, with a plan made for its envelope id (one
-- partition) instead of the generic one, and the envelope's own values win: what a posting records is
-- always its envelope's. The same batch: 4-7 ms with 61 partitions.

-- +goose Up
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION ledger_transaction_delivery() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp SET plan_cache_mode = force_custom_plan AS $$
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
