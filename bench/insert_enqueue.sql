-- pgbench script: the SQL of one ingest delivery without HTTP or signature
-- check: the envelope insert and a River job insert (unique key, as River's
-- InsertTx writes it) plus River's insert notification, in one transaction.
-- Used by scripts/bench-ingest as the baseline for BenchmarkIngestHTTP.
\set n random(1, 2000000000)
BEGIN;
INSERT INTO envelope (source, provider, delivery_id, event_type, body, payload, headers, body_sha256, body_size)
VALUES ('bench', 'standard', 'pgb-' || :client_id || '-' || :n || '-' || clock_timestamp()::text, 'payment.succeeded',
        convert_to('{"type":"payment.succeeded","data":{"payment_id":"p","merchant_id":"m","amount_minor":1000,"currency":"USD"}}', 'UTF8'),
        '{"type":"payment.succeeded","data":{"payment_id":"p","merchant_id":"m","amount_minor":1000,"currency":"USD"}}',
        '{"Content-Type":"application/json","Webhook-Id":"x","Webhook-Signature":"[redacted]"}',
        sha256(convert_to(:n::text, 'UTF8')), 110)
ON CONFLICT (source, delivery_id) DO NOTHING
RETURNING id AS envelope_id \gset
INSERT INTO river_job (args, kind, max_attempts, metadata, priority, queue, scheduled_at, state, tags, unique_key, unique_states)
VALUES (jsonb_build_object('envelope_id', :envelope_id), 'process_envelope', 25, '{}', 1, 'default', now(), 'available', '{}',
        sha256(convert_to('process_envelope&envelope_id=' || :envelope_id, 'UTF8')), B'11110101')
ON CONFLICT (unique_key) WHERE unique_key IS NOT NULL AND unique_states IS NOT NULL AND river_job_state_in_bitmask(unique_states, state)
DO UPDATE SET kind = river_job.kind
RETURNING id;
SELECT pg_notify('river_insert', '{"queue":"default"}');
COMMIT;
