-- pgbench script: the worker's own SQL for Standard Webhooks payments, :batch envelopes per
-- transaction (pgbench -D batch=N: the worker's --batch-size; run with as many clients as its
-- --batch-concurrency), as one statement: claim pending envelopes (SKIP LOCKED) and lock their jobs
-- (the fence), post each payment (ledger transaction and two entries, with the deferred
-- balance triggers), mark the envelopes done, append the attempt rows, complete the jobs.
-- No handler code, no savepoints, no round trip per envelope: the ceiling that batched
-- processing can approach. Needs a backlog of pending payments over merchants whose
-- accounts exist (scripts/bench-pipeline makes both). Baseline of its worker figure.
BEGIN;
-- The statistics taken before the run say every envelope is pending; as the backlog drains, a
-- sequential scan for pending rows reads every done row first, and the planner would also scan
-- river_job for the job rows. The real worker looks rows up by index; so does this.
SET LOCAL enable_seqscan = off;
WITH claimed AS (
    SELECT e.id, e.payload->'data' AS d
      FROM envelope e
     WHERE e.status = 'pending'
     LIMIT :batch
       FOR NO KEY UPDATE SKIP LOCKED
), jobs AS (
    SELECT j.id
      FROM river_job j JOIN claimed c ON (j.args->>'envelope_id')::bigint = c.id
     WHERE j.kind = 'process_envelope'
       FOR UPDATE OF j
), t AS (
    INSERT INTO ledger_transaction (envelope_id, idempotency_key, kind, merchant, payment_key, currency, amount_minor)
    SELECT c.id, 'standard:' || (c.d->>'merchant_id') || ':payment:' || (c.d->>'payment_id'), 'payment', c.d->>'merchant_id',
           'standard:' || (c.d->>'merchant_id') || ':payment:' || (c.d->>'payment_id'), c.d->>'currency', (c.d->>'amount_minor')::bigint
      FROM claimed c
    RETURNING id, merchant, currency, amount_minor
), en AS (
    INSERT INTO ledger_entry (transaction_id, account_id, currency, amount_minor)
    SELECT t.id, a.id, t.currency, CASE a.name WHEN 'psp_clearing' THEN t.amount_minor ELSE -t.amount_minor END
      FROM t JOIN ledger_account a ON a.merchant = t.merchant AND a.name IN ('psp_clearing', 'sales')
), done AS (
    UPDATE envelope e
       SET status = 'done', processed_at = clock_timestamp(), attempts = e.attempts + 1, last_error = NULL,
           result = '{"posted":true,"kind":"payment"}'
      FROM claimed c WHERE e.id = c.id
), att AS (
    INSERT INTO envelope_attempt (envelope_id, job_id, attempt, outcome, started_at, worker)
    SELECT c.id, NULL, 1, 'done', clock_timestamp(), 'pgbench' FROM claimed c
)
UPDATE river_job SET state = 'completed', finalized_at = now(), attempt = 1, attempted_at = now()
 WHERE id IN (SELECT id FROM jobs);
COMMIT;
