-- Double-entry ledger. Entries are integer minor units, debits positive and
-- credits negative; the database itself refuses a transaction whose entries do
-- not sum to zero per currency, and refuses to change or delete posted rows.

-- +goose Up
CREATE TABLE ledger_account (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    merchant   text        NOT NULL CHECK (merchant <> ''),
    name       text        NOT NULL CHECK (name <> ''),
    created_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT ledger_account_merchant_name_key UNIQUE (merchant, name)
);

CREATE TABLE ledger_transaction (
    id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    envelope_id     bigint      NOT NULL REFERENCES envelope (id),
    idempotency_key text        NOT NULL CHECK (idempotency_key <> ''),
    kind            text        NOT NULL CHECK (kind IN ('payment', 'refund')),
    merchant        text        NOT NULL CHECK (merchant <> ''),
    payment_key     text        NOT NULL,  -- the payment's business key (a refund's links to its payment)
    currency        text        NOT NULL CHECK (currency ~ '^[A-Z]{3}$'),
    amount_minor    bigint      NOT NULL CHECK (amount_minor > 0),
    description     text        NOT NULL DEFAULT '',
    posted_at       timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT ledger_transaction_envelope_id_key UNIQUE (envelope_id),
    CONSTRAINT ledger_transaction_idempotency_key_key UNIQUE (idempotency_key),
    -- A payment links to itself; a refund to a payment that exists.
    CONSTRAINT ledger_transaction_payment_key_fkey FOREIGN KEY (payment_key) REFERENCES ledger_transaction (idempotency_key),
    CONSTRAINT ledger_transaction_payment_links_itself CHECK (kind = 'refund' OR payment_key = idempotency_key)
);

CREATE INDEX ledger_transaction_payment_key_idx ON ledger_transaction (payment_key, kind);
CREATE INDEX ledger_transaction_posted_at_idx ON ledger_transaction (posted_at);

CREATE TABLE ledger_entry (
    id             bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    transaction_id bigint NOT NULL REFERENCES ledger_transaction (id),
    account_id     bigint NOT NULL REFERENCES ledger_account (id),
    currency       text   NOT NULL CHECK (currency ~ '^[A-Z]{3}$'),
    amount_minor   bigint NOT NULL CHECK (amount_minor <> 0)
);

CREATE INDEX ledger_entry_transaction_id_idx ON ledger_entry (transaction_id);
CREATE INDEX ledger_entry_account_id_idx ON ledger_entry (account_id, currency);

-- +goose StatementBegin
CREATE FUNCTION ledger_check_balanced() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    bad record;
BEGIN
    SELECT e.currency, sum(e.amount_minor) AS total, count(*) AS n
      INTO bad
      FROM ledger_entry e
     WHERE e.transaction_id = NEW.transaction_id
     GROUP BY e.currency
    HAVING sum(e.amount_minor) <> 0 OR count(*) < 2
     LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'ledger transaction % does not balance in %: sum % over % entries',
            NEW.transaction_id, bad.currency, bad.total, bad.n
            USING ERRCODE = 'check_violation';
    END IF;
    RETURN NULL;
END;
$$;
-- +goose StatementEnd

-- Checked at COMMIT, after every entry of the transaction is in.
CREATE CONSTRAINT TRIGGER ledger_entry_balanced
    AFTER INSERT ON ledger_entry
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW EXECUTE FUNCTION ledger_check_balanced();

-- +goose StatementBegin
CREATE FUNCTION ledger_check_has_entries() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM ledger_entry WHERE transaction_id = NEW.id) THEN
        RAISE EXCEPTION 'ledger transaction % has no entries', NEW.id
            USING ERRCODE = 'check_violation';
    END IF;
    RETURN NULL;
END;
$$;
-- +goose StatementEnd

CREATE CONSTRAINT TRIGGER ledger_transaction_has_entries
    AFTER INSERT ON ledger_transaction
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW EXECUTE FUNCTION ledger_check_has_entries();

-- +goose StatementBegin
CREATE FUNCTION ledger_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION '% is append-only: % refused', TG_TABLE_NAME, TG_OP
        USING ERRCODE = 'insufficient_privilege';
END;
$$;
-- +goose StatementEnd

CREATE TRIGGER ledger_entry_append_only BEFORE UPDATE OR DELETE ON ledger_entry
    FOR EACH ROW EXECUTE FUNCTION ledger_append_only();
CREATE TRIGGER ledger_transaction_append_only BEFORE UPDATE OR DELETE ON ledger_transaction
    FOR EACH ROW EXECUTE FUNCTION ledger_append_only();

-- Balance per account and currency (debits positive).
CREATE VIEW ledger_balance AS
SELECT a.id AS account_id, a.merchant, a.name AS account, e.currency,
       sum(e.amount_minor)::bigint AS balance_minor,
       count(*) AS entries
  FROM ledger_entry e
  JOIN ledger_account a ON a.id = e.account_id
 GROUP BY a.id, a.merchant, a.name, e.currency;

-- +goose Down
DROP VIEW ledger_balance;
DROP TABLE ledger_entry;
DROP TABLE ledger_transaction;
DROP TABLE ledger_account;
DROP FUNCTION ledger_append_only();
DROP FUNCTION ledger_check_has_entries();
DROP FUNCTION ledger_check_balanced();
