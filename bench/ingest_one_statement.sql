-- pgbench script: the best any commit-per-delivery ingest can do on this schema. One
-- transaction holding one statement that inserts the envelope and its River job (with the
-- unique key River writes), so one round trip and one commit per delivery. River's insert
-- notification is left out: River sends it at most once per fetch cooldown, not per job.
-- Baseline of scripts/bench-pipeline's ingest figure (docs/benchmarks.md).
\set n random(1, 2000000000)
WITH e AS (
    INSERT INTO envelope (source, provider, delivery_id, event_type, body, payload, headers, body_sha256, body_size)
    VALUES ('payments', 'standard', 'pgb-' || :client_id || '-' || :n || '-' || clock_timestamp()::text, 'payment.succeeded',
            convert_to('{"type":"payment.succeeded","data":{"payment_id":"p","merchant_id":"m","amount_minor":1000,"currency":"EUR"}}', 'UTF8'),
            '{"type":"payment.succeeded","data":{"payment_id":"p","merchant_id":"m","amount_minor":1000,"currency":"EUR"}}',
            '{"Content-Type":"application/json","Webhook-Id":"x","Webhook-Signature":"[redacted]"}',
            sha256(convert_to(:n::text || clock_timestamp()::text, 'UTF8')), 110)
    ON CONFLICT (source, delivery_id) DO NOTHING
    RETURNING id
)
INSERT INTO river_job (args, kind, max_attempts, metadata, priority, queue, scheduled_at, state, tags, unique_key, unique_states)
SELECT jsonb_build_object('envelope_id', e.id, 'source', 'payments'), 'process_envelope', 25, '{}', 1, 'default', now(), 'available', '{}',
       sha256(convert_to('process_envelope&envelope_id=' || e.id, 'UTF8')), B'11110101'
  FROM e
ON CONFLICT (unique_key) WHERE unique_key IS NOT NULL AND unique_states IS NOT NULL AND river_job_state_in_bitmask(unique_states, state)
DO UPDATE SET kind = river_job.kind
RETURNING id;
