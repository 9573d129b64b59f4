-- Jobs: commands run inside a booking under its device mask.
CREATE TABLE jobs (
    id            INTEGER PRIMARY KEY,
    booking_id    INTEGER NOT NULL REFERENCES bookings(id),
    user_id       INTEGER NOT NULL REFERENCES users(id),
    name          TEXT    NOT NULL DEFAULT '',
    argv          TEXT    NOT NULL,  -- JSON array
    cwd           TEXT,
    env           TEXT    NOT NULL DEFAULT '{}',  -- JSON object of the user's extra variables
    state         TEXT    NOT NULL DEFAULT 'queued'
                  CHECK (state IN ('queued', 'running', 'exited', 'killed', 'cancelled', 'failed')),
    -- A cancel asked for while running: the runner stops the job.
    cancel_requested INTEGER NOT NULL DEFAULT 0,
    pid           INTEGER,
    created_at    TEXT    NOT NULL,
    started_at    TEXT,
    ended_at      TEXT,
    exit_code     INTEGER,
    signal        INTEGER,
    message       TEXT    NOT NULL DEFAULT ''
);
CREATE INDEX jobs_state ON jobs (state);
CREATE INDEX jobs_booking ON jobs (booking_id);
