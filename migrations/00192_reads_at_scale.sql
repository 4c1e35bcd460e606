-- Reads at size (issue 21): the payment audit view aggregates each payment's refunds once, instead of
-- one LATERAL aggregate per payment; the index of failing attempts covers snoozes too.
--
-- envelope_attempt_failure_idx (migration 00176) held the failed and retried attempts: the console's
-- Failures chart. The cookbook's "retries and snoozes by cause over the last week" also reads snoozes,
-- so it scanned every attempt (10.8 s at 10 M envelopes): envelope_attempt_failing_idx holds snoozes
-- too (a share of the attempts as small as the others; the chart's query, failed and retry only,
-- uses it as well), and replaces it once built. An index on a partitioned table cannot be built
-- CONCURRENTLY: it holds envelope_attempt's writers (the worker; not ingest) off while it builds,
-- about 20 s per 10 M attempts on 2 cores. Migrate in a quiet moment, or build it by hand first
-- (docs/operations.md, "Migrations"). The ledger's index is built CONCURRENTLY: postings go on.
--
-- NO TRANSACTION: CREATE INDEX CONCURRENTLY cannot run in one; each statement commits by itself, and
-- each is safe to run again (IF NOT EXISTS, OR REPLACE).
-- ledger_payment_audit was a LATERAL subquery per payment: "payments refunded more than once" took
-- 41.6 s at 6 M envelopes (2.7 M payments), one index probe per payment whether it had a refund or
-- not. Now the refunds and reversals are aggregated once, from a partial index that holds only them
-- (a small share of the ledger: built in one scan here, a few seconds at 10 M), and joined to their
-- payments; the delivery comes from the posting itself (ledger_transaction.source and delivery_id,
-- kept there since migration 00190), not from a join to the envelope. The columns, their order and
-- their meaning are unchanged; a payment without refunds reads 0 where the LATERAL read 0 too.

-- +goose NO TRANSACTION
-- +goose Up
CREATE INDEX IF NOT EXISTS envelope_attempt_failing_idx ON envelope_attempt (finished_at) INCLUDE (cause, envelope_id)
    WHERE outcome IN ('failed', 'retry', 'snoozed');
DROP INDEX IF EXISTS envelope_attempt_failure_idx;
CREATE INDEX CONCURRENTLY IF NOT EXISTS ledger_transaction_refund_idx ON ledger_transaction (payment_key) INCLUDE (kind, amount_minor, posted_at)
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
CREATE INDEX IF NOT EXISTS envelope_attempt_failure_idx ON envelope_attempt (finished_at) INCLUDE (cause, envelope_id)
    WHERE outcome IN ('failed', 'retry');
DROP INDEX IF EXISTS envelope_attempt_failing_idx;
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
DROP INDEX CONCURRENTLY IF EXISTS ledger_transaction_refund_idx;
