-- Least-privilege group roles, one per process kind (docs/operations.md, "Database roles"):
--   inbox_ingest  what ingest needs to store a delivery and enqueue its job, nothing else;
--   inbox_worker  processing, the ledger, retention and River's machinery;
--   inbox_admin   the operator's CLI: read everything, replay and purge.
-- They are NOLOGIN: grant one to a LOGIN role per deployment
--   CREATE ROLE ingest_prod LOGIN PASSWORD '...' IN ROLE inbox_ingest;
-- Roles belong to the cluster, grants to this database: the roles are created only when missing
-- (the migrating role needs CREATEROLE then, or a DBA creates them beforehand), the grants are
-- (re)applied in every database migrated. Migrations themselves run as the schema's owner.
-- internal/audit/roles_test.go fails when a table or view has no grant decision here.

-- +goose Up
-- +goose StatementBegin
DO $$
DECLARE
    r text;
BEGIN
    FOREACH r IN ARRAY ARRAY['inbox_ingest', 'inbox_worker', 'inbox_admin'] LOOP
        IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = r) THEN
            BEGIN
                EXECUTE format('CREATE ROLE %I NOLOGIN', r);
            EXCEPTION WHEN duplicate_object OR unique_violation THEN
                NULL; -- created meanwhile by a concurrent migration of another database
            END;
        END IF;
    END LOOP;
END
$$;
-- +goose StatementEnd

GRANT USAGE ON SCHEMA public TO inbox_ingest, inbox_worker, inbox_admin;

-- ingest: insert the envelope and its job in one transaction (internal/envelope/store.go).
-- A taken delivery id is read FOR KEY SHARE, which PostgreSQL allows only with UPDATE on at least
-- one column: body_size is the one whose change harms least (it restates octet_length(body)).
GRANT INSERT ON envelope, envelope_duplicate, envelope_conflict TO inbox_ingest;
GRANT SELECT (id, source, delivery_id, body_sha256), UPDATE (body_size) ON envelope TO inbox_ingest;
GRANT SELECT (id) ON envelope_conflict TO inbox_ingest;
-- River's insert: INSERT ... ON CONFLICT (unique_key) DO UPDATE ... RETURNING *.
GRANT SELECT, INSERT, UPDATE ON river_job TO inbox_ingest;
GRANT USAGE ON SEQUENCE envelope_id_seq, envelope_duplicate_id_seq, envelope_conflict_id_seq, river_job_id_seq TO inbox_ingest;

-- worker: process envelopes, post to the ledger (append-only: no UPDATE or DELETE), throttle,
-- purge (retention), and everything River's client does (leader election, queues, rescuer,
-- cleaner, notifications).
GRANT SELECT, UPDATE, DELETE ON envelope TO inbox_worker;
GRANT SELECT, INSERT, DELETE ON envelope_attempt TO inbox_worker;
GRANT SELECT, DELETE ON envelope_duplicate, envelope_conflict, envelope_replay TO inbox_worker;
GRANT SELECT, INSERT ON ledger_account, ledger_transaction, ledger_entry TO inbox_worker;
-- A refund locks its payment FOR UPDATE, which needs UPDATE on one column: description (the
-- append-only trigger of 00101 refuses any UPDATE of a posted row anyway).
GRANT UPDATE (description) ON ledger_transaction TO inbox_worker;
GRANT SELECT ON ledger_balance TO inbox_worker;
GRANT SELECT, INSERT, UPDATE, DELETE ON throttle_window TO inbox_worker;
GRANT SELECT, INSERT, UPDATE, DELETE ON river_job, river_leader, river_queue, river_notification TO inbox_worker;
GRANT SELECT ON river_migration TO inbox_worker;
GRANT USAGE, SELECT ON SEQUENCE envelope_attempt_id_seq, ledger_account_id_seq, ledger_transaction_id_seq,
    ledger_entry_id_seq, river_job_id_seq, river_notification_id_seq TO inbox_worker;

-- admin: the CLI (envelopes, stats, replay, purge, migrate status) and the audit views.
GRANT SELECT ON envelope, envelope_attempt, envelope_duplicate, envelope_conflict, envelope_replay,
    ledger_account, ledger_transaction, ledger_entry, throttle_window,
    river_job, river_leader, river_queue, river_notification, river_migration, goose_db_version,
    envelope_audit, envelope_conflict_audit, envelope_replay_audit, envelope_retry_stats,
    ledger_balance, ledger_payment_audit, ledger_transaction_audit TO inbox_admin;
GRANT UPDATE, DELETE ON envelope TO inbox_admin;
GRANT DELETE ON envelope_attempt, envelope_duplicate, envelope_conflict, envelope_replay TO inbox_admin;
GRANT INSERT ON envelope_replay TO inbox_admin;
GRANT INSERT, UPDATE, DELETE ON river_job TO inbox_admin;
GRANT USAGE ON SEQUENCE envelope_replay_id_seq, river_job_id_seq TO inbox_admin;

-- +goose Down
-- The roles stay: other databases of the cluster may use them. Only this database's grants go.
REVOKE ALL ON ALL TABLES IN SCHEMA public FROM inbox_ingest, inbox_worker, inbox_admin;
REVOKE ALL ON ALL SEQUENCES IN SCHEMA public FROM inbox_ingest, inbox_worker, inbox_admin;
REVOKE USAGE ON SCHEMA public FROM inbox_ingest, inbox_worker, inbox_admin;
