-- The presentment (customer-facing) amount of a payment or refund posted in
-- another currency: a Shopify order paid in EUR by a shop that books in USD
-- is posted in USD and records the EUR it was presented in, so its refunds,
-- which Shopify states in EUR, post in USD at the order's own rate.

-- +goose Up
CREATE TABLE ledger_presentment (
    transaction_id bigint NOT NULL PRIMARY KEY REFERENCES ledger_transaction (id),
    currency       text   NOT NULL CHECK (currency ~ '^[A-Z]{3}$'),
    amount_minor   bigint NOT NULL CHECK (amount_minor > 0)
);

CREATE TRIGGER ledger_presentment_append_only BEFORE UPDATE OR DELETE ON ledger_presentment
    FOR EACH ROW EXECUTE FUNCTION ledger_append_only();

-- The roles of 00110: the worker posts and reads it, the admin audits it.
GRANT SELECT, INSERT ON ledger_presentment TO inbox_worker;
GRANT SELECT ON ledger_presentment TO inbox_admin;

-- +goose Down
DROP TABLE ledger_presentment;
