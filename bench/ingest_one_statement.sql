-- pgbench script: the best any commit-per-delivery ingest can do on this schema. One
-- transaction holding one statement that stores a fresh Standard Webhooks payment as the real
-- store does (internal/envelope/store.go, insertEnvelopes): its key in envelope_key, with an id
-- from envelope_next_id(), ON CONFLICT (delivery_id, source) DO NOTHING; the envelope row; the
-- raw body and parsed payload in envelope_body; then the River job that river.InsertManyTx
-- writes for envelope.ProcessJob (kind process_envelope, args {envelope_id, source}, River's
-- default max_attempts, its unique key sha256('&kind=process_envelope&args={"envelope_id":ID}')
-- and unique states available, pending, retryable, running, scheduled: B'11110001', available
-- being the rightmost bit), with River's ON CONFLICT. So one round trip and one commit per
-- delivery. Left out: the store's takeover of a key whose envelope retention dropped (an index
-- probe that finds nothing for a fresh delivery), the duplicate and conflict lookups (none:
-- every delivery id is new), and River's insert notification (River sends it at most once per
-- fetch cooldown, not per job). The body is inboxload's (merchants m_000..m_099), so
-- bench/worker_batch.sql can process what this stores. bench/bench_sql_test.go pins it to the
-- schema and to what the real store writes. Baseline of scripts/bench-pipeline's ingest figure
-- (docs/benchmarks.md).
\set n random(1, 2000000000)
WITH d AS (
    SELECT x.delivery_id,
           convert_to(format('{"type":"payment.succeeded","timestamp":"2026-11-30T00:00:00Z","data":{"payment_id":"pay_%s","merchant_id":"m_%s","amount_minor":%s,"currency":"EUR"}}',
                             x.delivery_id, lpad((:n % 100)::text, 3, '0'), 1000 + :n % 1000), 'UTF8') AS body
      FROM (SELECT 'pgb-' || :client_id || '-' || :n || '-' || clock_timestamp()::text AS delivery_id) x
), k AS (
    INSERT INTO envelope_key (delivery_id, source, envelope_id)
    SELECT d.delivery_id, 'payments', envelope_next_id() FROM d
    ON CONFLICT (delivery_id, source) DO NOTHING
    RETURNING delivery_id, source, envelope_id
), e AS (
    INSERT INTO envelope (id, source, provider, delivery_id, event_type, headers, body_sha256, body_size, signed_at, origin, trace_context)
    SELECT k.envelope_id, k.source, 'standard', k.delivery_id, 'payment.succeeded',
           jsonb_build_object('Content-Type', 'application/json', 'User-Agent', 'Go-http-client/1.1', 'Webhook-Id', k.delivery_id,
                              'Webhook-Signature', '[redacted]', 'Webhook-Timestamp', extract(epoch FROM now())::bigint::text),
           sha256(d.body), octet_length(d.body), date_trunc('second', now()), 'webhook', NULL
      FROM k CROSS JOIN d
    RETURNING id, source
), b AS (
    INSERT INTO envelope_body (id, body, payload)
    SELECT k.envelope_id, d.body, convert_from(d.body, 'UTF8')::jsonb FROM k CROSS JOIN d
)
INSERT INTO river_job (args, kind, max_attempts, metadata, priority, queue, scheduled_at, state, tags, unique_key, unique_states)
SELECT jsonb_build_object('envelope_id', e.id, 'source', e.source), 'process_envelope', 25, '{}', 1, 'default', now(), 'available', '{}',
       sha256(convert_to('&kind=process_envelope&args={"envelope_id":' || e.id || '}', 'UTF8')), B'11110001'
  FROM e
ON CONFLICT (unique_key) WHERE unique_key IS NOT NULL AND unique_states IS NOT NULL AND river_job_state_in_bitmask(unique_states, state)
DO UPDATE SET kind = river_job.kind
RETURNING id;
