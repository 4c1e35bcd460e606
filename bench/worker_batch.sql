-- pgbench script: the worker's own SQL for Standard Webhooks payments, :batch envelopes per
-- transaction (pgbench -D batch=N: the worker's --batch-size; run with as many clients as its
-- --batch-concurrency), as one statement, doing what internal/worker (processTx) does to a batch
-- of first attempts: claim pending envelopes (FOR NO KEY UPDATE SKIP LOCKED, as LockMany) and
-- lock their jobs (the fence), read each payload from envelope_body (or the row's own copy),
-- post each payment (ledger transaction with its source, delivery id and description, and two
-- entries, written as ledger.Deferred's flush writes them, with the delivery and deferred
-- balance triggers), mark the envelopes done with the handler's result, append the attempt rows
-- (FinishMany), and delete the jobs (riverjob.DeleteRunning: a finished job's row is deleted, not
-- completed). No handler code, no savepoints, no round trip per envelope, no River fetch (the
-- jobs stay available until deleted; River's fetch and its completer's no-op after the delete
-- are left out): the ceiling that batched processing can approach. A payment already in the
-- ledger (a replay) is not handled: its envelope stays pending with its job, where the real
-- worker runs the batch again with savepoints. Needs a backlog of pending payments over merchants
-- whose psp_clearing and sales accounts exist (scripts/bench-pipeline makes both; a missing
-- account fails the transaction at COMMIT, on the balance check). bench/bench_sql_test.go pins it
-- to the schema and to what the real worker writes. Baseline of scripts/bench-pipeline's worker
-- figure.
BEGIN;
-- The statistics taken before the run say every envelope is pending; as the backlog drains, a
-- sequential scan for pending rows reads every done row first, and the planner would also scan
-- river_job for the job rows. The real worker looks rows up by index; so does this.
SET LOCAL enable_seqscan = off;
WITH claimed AS (
    SELECT e.id, e.source, e.delivery_id, e.event_type, e.payload, clock_timestamp() AS started_at
      FROM envelope e
     WHERE e.status = 'pending'
     LIMIT :batch
       FOR NO KEY UPDATE SKIP LOCKED
), jobs AS (
    SELECT j.id, (j.args->>'envelope_id')::bigint AS envelope_id, j.attempt
      FROM river_job j JOIN claimed c ON (j.args->>'envelope_id')::bigint = c.id
     WHERE j.kind = 'process_envelope'
     ORDER BY j.id
       FOR UPDATE OF j
), p AS (
    SELECT c.id, c.source, c.delivery_id, c.event_type, c.started_at, x.d,
           'standard:' || (x.d->>'merchant_id') || ':payment:' || (x.d->>'payment_id') AS key
      FROM claimed c
      LEFT JOIN envelope_body b ON b.id = c.id
     CROSS JOIN LATERAL (SELECT coalesce(c.payload, b.payload)->'data' AS d) x
), t AS (
    INSERT INTO ledger_transaction (envelope_id, idempotency_key, kind, merchant, payment_key, currency, amount_minor, description, source, delivery_id)
    SELECT p.id, p.key, 'payment', p.d->>'merchant_id', p.key, upper(p.d->>'currency'), (p.d->>'amount_minor')::bigint,
           format('standard %s %s (delivery %s)', p.event_type, p.d->>'payment_id', p.delivery_id), p.source, p.delivery_id
      FROM p ORDER BY p.key
    ON CONFLICT DO NOTHING
    RETURNING id, envelope_id, idempotency_key, merchant, currency, amount_minor
), en AS (
    INSERT INTO ledger_entry (transaction_id, account_id, currency, amount_minor)
    SELECT t.id, a.id, t.currency, CASE a.name WHEN 'psp_clearing' THEN t.amount_minor ELSE -t.amount_minor END
      FROM t JOIN ledger_account a ON a.merchant = t.merchant AND a.name IN ('psp_clearing', 'sales')
), done AS (
    UPDATE envelope e
       SET status = 'done', processed_at = clock_timestamp(), attempts = e.attempts + 1, last_error = NULL, last_cause = NULL,
           result = jsonb_build_object('posted', true, 'ledger_transaction_id', t.id, 'kind', 'payment', 'idempotency_key', t.idempotency_key,
                                       'merchant', t.merchant, 'amount_minor', t.amount_minor, 'currency', t.currency)
      FROM t WHERE e.id = t.envelope_id AND e.status = 'pending'
    RETURNING e.id
), att AS (
    INSERT INTO envelope_attempt (envelope_id, job_id, attempt, outcome, error, cause, started_at, finished_at, worker)
    SELECT p.id, j.id, j.attempt + 1, 'done', NULL, NULL, p.started_at, clock_timestamp(), 'pgbench'
      FROM done JOIN p ON p.id = done.id JOIN jobs j ON j.envelope_id = done.id
)
DELETE FROM river_job WHERE id IN (SELECT j.id FROM jobs j JOIN done ON done.id = j.envelope_id);
COMMIT;
