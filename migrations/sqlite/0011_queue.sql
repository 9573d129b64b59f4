-- The job queue: jobs that wait for cards instead of a booking. A queued job has no booking
-- until the scheduler starts it; then it gets one (on the cards it was given, from its start
-- to its time limit), so the calendar, the overlap rules, quotas and the watchdog all see it,
-- and the booking is released when the job ends.
--
-- Jobs gain 'pending' (waiting for cards) and 'timed_out'; booking_id becomes optional. SQLite
-- cannot alter a CHECK or a NOT NULL, so the table is rebuilt; nothing references it.
CREATE TABLE jobs_new (
    id            INTEGER PRIMARY KEY,
    booking_id    INTEGER REFERENCES bookings(id),
    user_id       INTEGER NOT NULL REFERENCES users(id),
    name          TEXT    NOT NULL DEFAULT '',
    argv          TEXT    NOT NULL,  -- JSON array
    cwd           TEXT,
    env           TEXT    NOT NULL DEFAULT '{}',  -- JSON object of the user's extra variables
    state         TEXT    NOT NULL DEFAULT 'queued'
                  CHECK (state IN ('pending', 'queued', 'running', 'exited', 'killed',
                                   'cancelled', 'failed', 'lost', 'timed_out')),
    cancel_requested INTEGER NOT NULL DEFAULT 0,
    pid           INTEGER,
    pid_start     INTEGER,
    boot_id       TEXT,
    stop_requested_ms INTEGER,
    stop_reason   TEXT,
    peak_memory_bytes INTEGER,
    -- Queue jobs only (NULL for jobs submitted into a booking):
    gpus          INTEGER CHECK (gpus IS NULL OR gpus > 0),
    time_limit_s  INTEGER CHECK (time_limit_s IS NULL OR time_limit_s > 0),
    min_memory_bytes INTEGER,
    created_at    TEXT    NOT NULL,
    started_at    TEXT,
    ended_at      TEXT,
    exit_code     INTEGER,
    signal        INTEGER,
    message       TEXT    NOT NULL DEFAULT '',
    CHECK (booking_id IS NOT NULL OR gpus IS NOT NULL)
);
INSERT INTO jobs_new (id, booking_id, user_id, name, argv, cwd, env, state, cancel_requested,
                      pid, pid_start, boot_id, stop_requested_ms, stop_reason, peak_memory_bytes,
                      created_at, started_at, ended_at, exit_code, signal, message)
    SELECT id, booking_id, user_id, name, argv, cwd, env, state, cancel_requested,
           pid, pid_start, boot_id, stop_requested_ms, stop_reason, peak_memory_bytes,
           created_at, started_at, ended_at, exit_code, signal, message FROM jobs;
DROP TABLE jobs;
ALTER TABLE jobs_new RENAME TO jobs;
CREATE INDEX jobs_state ON jobs (state);
CREATE INDEX jobs_booking ON jobs (booking_id);
