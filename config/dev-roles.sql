-- DEVELOPMENT ONLY: the LOGIN roles `make run` and `docker compose` run ingest, the worker and the
-- worker's console (inbox_admin_dev: the console replays, which the worker's role may not) as,
-- members of the group roles migration 00110_roles.sql creates. The passwords are public and
-- fake. In production create your own (docs/operations.md, "Database roles"). Safe to run twice.
SELECT format('CREATE ROLE %I LOGIN PASSWORD %L IN ROLE %I', name, pass, grp)
  FROM (VALUES ('inbox_ingest_dev', 'ingest-dev-password', 'inbox_ingest'),
               ('inbox_worker_dev', 'worker-dev-password', 'inbox_worker'),
               ('inbox_admin_dev', 'admin-dev-password', 'inbox_admin')) AS r (name, pass, grp)
 WHERE NOT EXISTS (SELECT FROM pg_roles WHERE rolname = r.name)
\gexec
