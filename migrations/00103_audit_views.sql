-- Audit views: the questions an auditor asks, one SELECT away. They read the
-- inbox's own tables only (never River's river_job, whose finished rows River
-- deletes and whose shape River's own migrations may change). Each joins per
-- row through indexed lateral subqueries, so a WHERE on the view's envelope or
-- transaction columns is pushed down and reads only the matching rows.
-- docs/schema.md documents every column; docs/audit.md uses them.

-- +goose Up

-- One row per envelope, without its body or payload: the envelope's own
-- columns, its processing attempts, replays and conflicts counted, its last
-- attempt, and the ledger transaction it posted (if any).
CREATE VIEW envelope_audit AS
SELECT e.id,
       e.source,
       e.provider,
       e.delivery_id,
       e.event_type,
       e.status,
       e.received_at,
       e.signed_at,
       e.processed_at,
       e.processed_at - e.received_at AS time_to_final,
       e.attempts,
       e.last_error,
       e.result,
       e.headers,
       encode(e.body_sha256, 'hex') AS body_sha256,
       e.body_size,
       e.body IS NOT NULL AS body_kept,
       e.body_purged_at,
       d.duplicates,
       d.last_duplicate_at,
       a.attempt_rows,
       la.outcome AS last_outcome,
       la.finished_at AS last_attempt_at,
       la.error AS last_attempt_error,
       la.job_id AS last_job_id,
       la.worker AS last_worker,
       r.replays,
       r.last_replayed_at,
       c.conflicts,
       c.last_conflict_at,
       t.id AS ledger_transaction_id,
       t.kind AS ledger_kind,
       t.merchant,
       t.currency AS ledger_currency,
       t.amount_minor AS ledger_amount_minor,
       t.posted_at AS ledger_posted_at
  FROM envelope e
 CROSS JOIN LATERAL (SELECT count(*) AS attempt_rows FROM envelope_attempt x WHERE x.envelope_id = e.id) a
 CROSS JOIN LATERAL (SELECT count(*) AS duplicates, max(x.received_at) AS last_duplicate_at
                       FROM envelope_duplicate x WHERE x.envelope_id = e.id) d
  LEFT JOIN LATERAL (SELECT x.outcome, x.finished_at, x.error, x.job_id, x.worker
                       FROM envelope_attempt x
                      WHERE x.envelope_id = e.id
                      ORDER BY x.id DESC
                      LIMIT 1) la ON true
 CROSS JOIN LATERAL (SELECT count(*) AS replays, max(x.replayed_at) AS last_replayed_at
                       FROM envelope_replay x WHERE x.envelope_id = e.id) r
 CROSS JOIN LATERAL (SELECT count(*) AS conflicts, max(x.received_at) AS last_conflict_at
                       FROM envelope_conflict x WHERE x.envelope_id = e.id) c
  LEFT JOIN ledger_transaction t ON t.envelope_id = e.id;

-- One row per ledger transaction, with the delivery that caused it and a
-- summary of its entries.
CREATE VIEW ledger_transaction_audit AS
SELECT t.id AS transaction_id,
       t.kind,
       t.merchant,
       t.currency,
       t.amount_minor,
       t.idempotency_key,
       t.payment_key,
       t.description,
       t.posted_at,
       t.envelope_id,
       e.source,
       e.provider,
       e.delivery_id,
       e.event_type,
       e.status AS envelope_status,
       e.received_at,
       e.processed_at,
       en.entries,
       en.debit_minor,
       en.credit_minor,
       en.summary
  FROM ledger_transaction t
  JOIN envelope e ON e.id = t.envelope_id
 CROSS JOIN LATERAL (
       SELECT count(*) AS entries,
              coalesce(sum(le.amount_minor) FILTER (WHERE le.amount_minor > 0), 0)::bigint AS debit_minor,
              coalesce(-sum(le.amount_minor) FILTER (WHERE le.amount_minor < 0), 0)::bigint AS credit_minor,
              string_agg(format('%s %s %s %s',
                                CASE WHEN le.amount_minor > 0 THEN 'Dr' ELSE 'Cr' END,
                                a.name, abs(le.amount_minor), le.currency),
                         ', ' ORDER BY le.amount_minor DESC, le.id) AS summary
         FROM ledger_entry le
         JOIN ledger_account a ON a.id = le.account_id
        WHERE le.transaction_id = t.id) en;

-- One row per payment: what was paid, refunded so far, and what remains.
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

-- Per source and provider, over every stored envelope: deliveries, the
-- provider's retries (duplicates received), our processing attempts, and
-- where the envelopes ended up. Aggregates the whole envelope table: for a
-- time window, query envelope_audit with a WHERE on received_at instead.
CREATE VIEW envelope_retry_stats AS
WITH c AS (SELECT envelope_id, count(*) AS n FROM envelope_conflict GROUP BY envelope_id),
     d AS (SELECT envelope_id, count(*) AS n FROM envelope_duplicate GROUP BY envelope_id),
     r AS (SELECT envelope_id, count(*) AS n FROM envelope_replay GROUP BY envelope_id),
     s AS (SELECT envelope_id, count(*) AS n FROM envelope_attempt WHERE outcome = 'snoozed' GROUP BY envelope_id)
SELECT e.source,
       e.provider,
       count(*) AS deliveries,
       coalesce(sum(d.n), 0)::bigint AS duplicates_received,
       count(*) FILTER (WHERE d.n > 0) AS deliveries_with_duplicates,
       coalesce(max(d.n), 0)::bigint AS max_duplicates,
       coalesce(sum(e.attempts), 0)::bigint AS attempts,
       count(*) FILTER (WHERE e.attempts > 1) AS deliveries_retried,
       coalesce(max(e.attempts), 0) AS max_attempts,
       coalesce(sum(s.n), 0)::bigint AS snoozes,
       coalesce(sum(c.n), 0)::bigint AS conflicts,
       coalesce(sum(r.n), 0)::bigint AS replays,
       count(*) FILTER (WHERE e.status = 'pending') AS pending,
       count(*) FILTER (WHERE e.status = 'done') AS done,
       count(*) FILTER (WHERE e.status = 'failed') AS failed,
       count(*) FILTER (WHERE e.status = 'ignored') AS ignored,
       min(e.received_at) AS first_received_at,
       max(e.received_at) AS last_received_at
  FROM envelope e
  LEFT JOIN c ON c.envelope_id = e.id
  LEFT JOIN d ON d.envelope_id = e.id
  LEFT JOIN r ON r.envelope_id = e.id
  LEFT JOIN s ON s.envelope_id = e.id
 GROUP BY e.source, e.provider;

-- One row per conflicting delivery (a stored delivery id reused with a
-- different body), next to the original it conflicted with.
CREATE VIEW envelope_conflict_audit AS
SELECT c.id AS conflict_id,
       c.received_at,
       c.envelope_id,
       c.source,
       c.delivery_id,
       e.provider,
       e.event_type,
       e.status AS envelope_status,
       e.received_at AS original_received_at,
       c.received_at - e.received_at AS after_original,
       encode(e.body_sha256, 'hex') AS original_sha256,
       encode(c.body_sha256, 'hex') AS conflicting_sha256,
       e.body_size AS original_size,
       c.body_size AS conflicting_size,
       e.body_purged_at AS original_body_purged_at,
       c.headers AS conflicting_headers
  FROM envelope_conflict c
  JOIN envelope e ON e.id = c.envelope_id;

-- One row per replay of an envelope: who, when, why, with which filter, and
-- what the replay's job did (its attempts' outcomes, from envelope_attempt).
CREATE VIEW envelope_replay_audit AS
SELECT r.id AS replay_id,
       r.replayed_at,
       r.actor,
       r.reason,
       r.filter,
       r.batch_id,
       r.prior_status,
       r.job_id,
       r.envelope_id,
       e.source,
       e.provider,
       e.delivery_id,
       e.event_type,
       e.status AS current_status,
       e.processed_at,
       ja.attempts AS job_attempts,
       ja.last_outcome AS job_last_outcome,
       ja.last_attempt_at AS job_last_attempt_at
  FROM envelope_replay r
  JOIN envelope e ON e.id = r.envelope_id
 CROSS JOIN LATERAL (
       SELECT count(*) AS attempts,
              (array_agg(x.outcome ORDER BY x.id DESC))[1] AS last_outcome,
              max(x.finished_at) AS last_attempt_at
         FROM envelope_attempt x
        WHERE x.envelope_id = r.envelope_id AND x.job_id = r.job_id) ja;

-- Balances per account and currency as of ts: the entries of every ledger
-- transaction posted at or before ts. Same columns as ledger_balance.
-- posted_at is the posting transaction's start time (now()).
-- +goose StatementBegin
CREATE FUNCTION ledger_balance_at(ts timestamptz)
RETURNS TABLE (account_id bigint, merchant text, account text, currency text, balance_minor bigint, entries bigint)
LANGUAGE sql STABLE
AS $$
    SELECT a.id, a.merchant, a.name, le.currency, sum(le.amount_minor)::bigint, count(*)
      FROM ledger_entry le
      JOIN ledger_transaction t ON t.id = le.transaction_id
      JOIN ledger_account a ON a.id = le.account_id
     WHERE t.posted_at <= ts
     GROUP BY a.id, a.merchant, a.name, le.currency
$$;
-- +goose StatementEnd

-- +goose Down
DROP FUNCTION ledger_balance_at(timestamptz);
DROP VIEW envelope_replay_audit;
DROP VIEW envelope_conflict_audit;
DROP VIEW envelope_retry_stats;
DROP VIEW ledger_payment_audit;
DROP VIEW ledger_transaction_audit;
DROP VIEW envelope_audit;
