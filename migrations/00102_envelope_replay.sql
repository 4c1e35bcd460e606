-- Who replayed which envelopes, when, why and with which filter.

-- +goose Up
CREATE TABLE envelope_replay (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    envelope_id  bigint      NOT NULL REFERENCES envelope (id),
    actor        text        NOT NULL CHECK (actor <> ''),
    reason       text        NOT NULL CHECK (reason <> ''),
    filter       jsonb       NOT NULL DEFAULT '{}'::jsonb, -- the command's selection (ids or filter flags)
    batch_id     uuid,                                     -- one per bulk replay run
    prior_status text        NOT NULL,                      -- the envelope's status before the replay
    job_id       bigint,                                    -- the River job inserted for it
    replayed_at  timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX envelope_replay_envelope_id_idx ON envelope_replay (envelope_id);
CREATE INDEX envelope_replay_replayed_at_idx ON envelope_replay (replayed_at);

-- +goose Down
DROP TABLE envelope_replay;
