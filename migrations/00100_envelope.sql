-- The inbox: one row per verified delivery, unique on (source, delivery_id).

-- +goose Up
CREATE TABLE envelope (
    id                bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    source            text        NOT NULL CHECK (source ~ '^[a-z0-9][a-z0-9_-]{0,62}$'),
    provider          text        NOT NULL CHECK (provider IN ('stripe', 'github', 'shopify', 'standard')),
    delivery_id       text        NOT NULL CHECK (delivery_id <> '' AND char_length(delivery_id) <= 512),
    event_type        text        NOT NULL CHECK (char_length(event_type) <= 256),
    status            text        NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'done', 'failed', 'ignored')),
    body              bytea,                 -- the raw body, byte-exact; NULL once retention dropped it
    payload           jsonb,                 -- the body parsed (NULL if the provider's body is not JSON)
    headers           jsonb       NOT NULL DEFAULT '{}'::jsonb, -- relevant headers, signature values removed
    body_sha256       bytea       NOT NULL CHECK (octet_length(body_sha256) = 32),
    body_size         integer     NOT NULL CHECK (body_size >= 0),
    signed_at         timestamptz,           -- the provider's signed timestamp (Stripe, Standard Webhooks)
    received_at       timestamptz NOT NULL DEFAULT now(),
    processed_at      timestamptz,           -- set when status left 'pending'
    attempts          integer     NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    last_error        text,
    result            jsonb,
    body_purged_at    timestamptz,
    CONSTRAINT envelope_source_delivery_id_key UNIQUE (source, delivery_id),
    CONSTRAINT envelope_processed_when_final CHECK ((status = 'pending') = (processed_at IS NULL))
);

CREATE INDEX envelope_status_received_at_idx ON envelope (status, received_at);
CREATE INDEX envelope_received_at_idx ON envelope (received_at);
CREATE INDEX envelope_event_type_idx ON envelope (source, event_type);

-- A delivery that reused a stored delivery id with a different body. The
-- original envelope is never changed by it; this row is the operator's trace.
CREATE TABLE envelope_conflict (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    envelope_id bigint      NOT NULL REFERENCES envelope (id),
    source      text        NOT NULL,
    delivery_id text        NOT NULL,
    body_sha256 bytea       NOT NULL,
    body_size   integer     NOT NULL,
    body        bytea,
    headers     jsonb       NOT NULL DEFAULT '{}'::jsonb,
    received_at timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX envelope_conflict_envelope_id_idx ON envelope_conflict (envelope_id);

-- One row per redelivery of a stored delivery id with the same body (a
-- provider's retry). Append-only, so counting a retry never waits for the
-- worker that holds the envelope's row.
CREATE TABLE envelope_duplicate (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    envelope_id bigint      NOT NULL REFERENCES envelope (id),
    received_at timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX envelope_duplicate_envelope_id_idx ON envelope_duplicate (envelope_id, received_at);

-- One row per processing attempt and its outcome.
CREATE TABLE envelope_attempt (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    envelope_id bigint      NOT NULL REFERENCES envelope (id),
    job_id      bigint,
    attempt     integer     NOT NULL,   -- River's attempt number for the job
    outcome     text        NOT NULL CHECK (outcome IN ('done', 'ignored', 'failed', 'retry', 'snoozed')),
    error       text,
    started_at  timestamptz NOT NULL,
    finished_at timestamptz NOT NULL DEFAULT now(),
    duration_ms double precision GENERATED ALWAYS AS (extract(epoch FROM (finished_at - started_at)) * 1000) STORED,
    worker      text
);

CREATE INDEX envelope_attempt_envelope_id_idx ON envelope_attempt (envelope_id, id);

-- +goose Down
DROP TABLE envelope_attempt;
DROP TABLE envelope_duplicate;
DROP TABLE envelope_conflict;
DROP TABLE envelope;
