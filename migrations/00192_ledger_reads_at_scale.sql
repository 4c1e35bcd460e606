-- Reads at size (issue 21): the payment audit view aggregates each payment's refunds once, instead of
-- one LATERAL aggregate per payment.
--
-- ledger_payment_audit was a LATERAL subquery per payment: "payments refunded more than once" took
-- 41.6 s at 6 M envelopes (2.7 M payments), one index probe per payment whether it had a refund or
-- not. Now the refunds and reversals are aggregated once, from a partial index that holds only them
-- (a small share of the ledger: built in one scan here, a few seconds at 10 M), and joined to their
-- payments; the delivery comes from the posting itself (ledger_transaction.source and delivery_id,
-- kept there since migration 00190), not from a join to the envelope. The columns, their order and
-- their meaning are unchanged; a payment without refunds reads 0 where the LATERAL read 0 too.

-- +goose Up
CREATE INDEX ledger_transaction_refund_idx ON ledger_transaction (payment_key) INCLUDE (kind, amount_minor, posted_at)
    WHERE kind IN ('refund', 'refund_reversal');

CREATE OR REPLACE VIEW ledger_payment_audit AS
SELECT p.id AS transaction_id,
       p.payment_key,
       p.merchant,
       p.currency,
       p.amount_minor,
       coalesce(rf.refunds, 0) AS refunds,
       coalesce(rf.refunded_minor, 0)::bigint AS refunded_minor,
       (p.amount_minor - coalesce(rf.refunded_minor, 0))::bigint AS remaining_minor,
       p.posted_at,
       rf.first_refund_at,
       rf.last_refund_at,
       p.envelope_id,
       p.source,
       p.delivery_id,
       coalesce(rf.reversals, 0) AS reversals,
       coalesce(rf.reversed_minor, 0)::bigint AS reversed_minor
  FROM ledger_transaction p
  LEFT JOIN (SELECT r.payment_key,
                    count(*) FILTER (WHERE r.kind = 'refund') AS refunds,
                    (coalesce(sum(r.amount_minor) FILTER (WHERE r.kind = 'refund'), 0)
                     - coalesce(sum(r.amount_minor) FILTER (WHERE r.kind = 'refund_reversal'), 0))::bigint AS refunded_minor,
                    min(r.posted_at) FILTER (WHERE r.kind = 'refund') AS first_refund_at,
                    max(r.posted_at) FILTER (WHERE r.kind = 'refund') AS last_refund_at,
                    count(*) FILTER (WHERE r.kind = 'refund_reversal') AS reversals,
                    coalesce(sum(r.amount_minor) FILTER (WHERE r.kind = 'refund_reversal'), 0)::bigint AS reversed_minor
               FROM ledger_transaction r
              WHERE r.kind IN ('refund', 'refund_reversal')
              GROUP BY r.payment_key) rf ON rf.payment_key = p.idempotency_key
 WHERE p.kind = 'payment';

-- +goose Down
CREATE OR REPLACE VIEW ledger_payment_audit AS
SELECT p.id AS transaction_id,
       p.payment_key,
       p.merchant,
       p.currency,
       p.amount_minor,
       rf.refunds,
       rf.refunded_minor,
       (p.amount_minor - rf.refunded_minor) AS remaining_minor,
       p.posted_at,
       rf.first_refund_at,
       rf.last_refund_at,
       p.envelope_id,
       COALESCE(e.source, p.source) AS source,
       COALESCE(e.delivery_id, p.delivery_id) AS delivery_id,
       rf.reversals,
       rf.reversed_minor
  FROM ledger_transaction p
  LEFT JOIN envelope e ON e.id = p.envelope_id
 CROSS JOIN LATERAL (
       SELECT count(*) FILTER (WHERE r.kind = 'refund') AS refunds,
              (COALESCE(sum(r.amount_minor) FILTER (WHERE r.kind = 'refund'), 0)
               - COALESCE(sum(r.amount_minor) FILTER (WHERE r.kind = 'refund_reversal'), 0))::bigint AS refunded_minor,
              min(r.posted_at) FILTER (WHERE r.kind = 'refund') AS first_refund_at,
              max(r.posted_at) FILTER (WHERE r.kind = 'refund') AS last_refund_at,
              count(*) FILTER (WHERE r.kind = 'refund_reversal') AS reversals,
              COALESCE(sum(r.amount_minor) FILTER (WHERE r.kind = 'refund_reversal'), 0)::bigint AS reversed_minor
         FROM ledger_transaction r
        WHERE r.payment_key = p.idempotency_key AND r.kind IN ('refund', 'refund_reversal')) rf
 WHERE p.kind = 'payment';
DROP INDEX ledger_transaction_refund_idx;
