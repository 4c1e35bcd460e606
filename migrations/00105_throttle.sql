-- Per-key processing counts for the worker's throttle: one row per key and
-- one-second window. UNLOGGED: after a crash the counts start again, which
-- only lets one window through unthrottled.

-- +goose Up
CREATE UNLOGGED TABLE throttle_window (
    key          text        NOT NULL,
    window_start timestamptz NOT NULL,
    count        integer     NOT NULL,
    PRIMARY KEY (key, window_start)
);

-- +goose Down
DROP TABLE throttle_window;
