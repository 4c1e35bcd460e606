-- +goose Up
-- envelope_audit shows the stable cause code of the last error (envelope.last_cause, 00171) next
-- to last_error, so an auditor groups failures by cause without parsing messages.
CREATE OR REPLACE VIEW envelope_audit AS
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
       t.posted_at AS ledger_posted_at,
       e.origin,
       e.backfill_run_id,
       e.last_cause
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

-- +goose Down
DROP VIEW envelope_audit;
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
       t.posted_at AS ledger_posted_at,
       e.origin,
       e.backfill_run_id
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
GRANT SELECT ON envelope_audit TO inbox_admin;
