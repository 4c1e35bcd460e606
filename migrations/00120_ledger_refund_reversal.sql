-- A refund that later failed (Stripe refund status "failed") is reversed by a
-- refund_reversal transaction: it debits psp_clearing and credits refunds,
-- linked to the payment like a refund. What a payment has had refunded is
-- its refunds minus their reversals. Outside a transaction, each check
-- swapped in one statement and validated separately, so checking existing
-- rows does not block the worker's postings (VALIDATE takes a SHARE UPDATE
-- EXCLUSIVE lock); the new checks only widen the old ones.

-- +goose NO TRANSACTION
-- +goose Up
ALTER TABLE ledger_transaction DROP CONSTRAINT IF EXISTS ledger_transaction_kind_check,
    ADD CONSTRAINT ledger_transaction_kind_check
    CHECK (kind IN ('payment', 'refund', 'refund_reversal')) NOT VALID,
    DROP CONSTRAINT IF EXISTS ledger_transaction_payment_links_itself,
    ADD CONSTRAINT ledger_transaction_payment_links_itself
    CHECK (kind <> 'payment' OR payment_key = idempotency_key) NOT VALID;
ALTER TABLE ledger_transaction VALIDATE CONSTRAINT ledger_transaction_kind_check;
ALTER TABLE ledger_transaction VALIDATE CONSTRAINT ledger_transaction_payment_links_itself;

CREATE OR REPLACE VIEW ledger_payment_audit AS
SELECT p.id AS transaction_id,
       p.payment_key,
       p.merchant,
       p.currency,
       p.amount_minor,
       rf.refunds,
       rf.refunded_minor,
       p.amount_minor - rf.refunded_minor AS remaining_minor,
       p.posted_at,
       rf.first_refund_at,
       rf.last_refund_at,
       p.envelope_id,
       e.source,
       e.delivery_id,
       rf.reversals,
       rf.reversed_minor
  FROM ledger_transaction p
  JOIN envelope e ON e.id = p.envelope_id
 CROSS JOIN LATERAL (
       SELECT count(*) FILTER (WHERE r.kind = 'refund') AS refunds,
              (coalesce(sum(r.amount_minor) FILTER (WHERE r.kind = 'refund'), 0)
               - coalesce(sum(r.amount_minor) FILTER (WHERE r.kind = 'refund_reversal'), 0))::bigint AS refunded_minor,
              min(r.posted_at) FILTER (WHERE r.kind = 'refund') AS first_refund_at,
              max(r.posted_at) FILTER (WHERE r.kind = 'refund') AS last_refund_at,
              count(*) FILTER (WHERE r.kind = 'refund_reversal') AS reversals,
              coalesce(sum(r.amount_minor) FILTER (WHERE r.kind = 'refund_reversal'), 0)::bigint AS reversed_minor
         FROM ledger_transaction r
        WHERE r.payment_key = p.idempotency_key AND r.kind IN ('refund', 'refund_reversal')) rf
 WHERE p.kind = 'payment';

-- +goose Down
DROP VIEW ledger_payment_audit;
CREATE VIEW ledger_payment_audit AS
SELECT p.id AS transaction_id,
       p.payment_key,
       p.merchant,
       p.currency,
       p.amount_minor,
       rf.refunds,
       rf.refunded_minor,
       p.amount_minor - rf.refunded_minor AS remaining_minor,
       p.posted_at,
       rf.first_refund_at,
       rf.last_refund_at,
       p.envelope_id,
       e.source,
       e.delivery_id
  FROM ledger_transaction p
  JOIN envelope e ON e.id = p.envelope_id
 CROSS JOIN LATERAL (
       SELECT count(*) AS refunds,
              coalesce(sum(r.amount_minor), 0)::bigint AS refunded_minor,
              min(r.posted_at) AS first_refund_at,
              max(r.posted_at) AS last_refund_at
         FROM ledger_transaction r
        WHERE r.payment_key = p.idempotency_key AND r.kind = 'refund') rf
 WHERE p.kind = 'payment';
ALTER TABLE ledger_transaction DROP CONSTRAINT IF EXISTS ledger_transaction_payment_links_itself,
    ADD CONSTRAINT ledger_transaction_payment_links_itself
    CHECK (kind = 'refund' OR payment_key = idempotency_key),
    DROP CONSTRAINT IF EXISTS ledger_transaction_kind_check,
    ADD CONSTRAINT ledger_transaction_kind_check
    CHECK (kind IN ('payment', 'refund'));
