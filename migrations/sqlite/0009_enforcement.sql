-- Enforcement: jobs that survive a server restart, unbooked GPU use, idle bookings.

-- Jobs gain the 'lost' state (its process vanished while the server was down), what it takes
-- to recognise their process after a restart (pid start time in clock ticks since boot, and
-- the boot it belongs to), and their peak GPU memory. SQLite cannot alter a CHECK, so the
-- table is rebuilt; nothing references it.
CREATE TABLE jobs_new (
    id            INTEGER PRIMARY KEY,
    booking_id    INTEGER NOT NULL REFERENCES bookings(id),
    user_id       INTEGER NOT NULL REFERENCES users(id),
    name          TEXT    NOT NULL DEFAULT '',
    argv          TEXT    NOT NULL,  -- JSON array
    cwd           TEXT,
    env           TEXT    NOT NULL DEFAULT '{}',  -- JSON object of the user's extra variables
    state         TEXT    NOT NULL DEFAULT 'queued'
                  CHECK (state IN ('queued', 'running', 'exited', 'killed', 'cancelled', 'failed', 'lost')),
    cancel_requested INTEGER NOT NULL DEFAULT 0,
    pid           INTEGER,
    pid_start     INTEGER,  -- field 22 of /proc/<pid>/stat when it started
    boot_id       TEXT,     -- /proc/sys/kernel/random/boot_id when it started
    -- When SIGTERM went to its group and why (so a restarted server keeps the grace period).
    stop_requested_ms INTEGER,
    stop_reason   TEXT,
    peak_memory_bytes INTEGER,
    created_at    TEXT    NOT NULL,
    started_at    TEXT,
    ended_at      TEXT,
    exit_code     INTEGER,
    signal        INTEGER,
    message       TEXT    NOT NULL DEFAULT ''
);
INSERT INTO jobs_new (id, booking_id, user_id, name, argv, cwd, env, state, cancel_requested,
                      pid, created_at, started_at, ended_at, exit_code, signal, message)
    SELECT id, booking_id, user_id, name, argv, cwd, env, state, cancel_requested,
           pid, created_at, started_at, ended_at, exit_code, signal, message FROM jobs;
DROP TABLE jobs;
ALTER TABLE jobs_new RENAME TO jobs;
CREATE INDEX jobs_state ON jobs (state);
CREATE INDEX jobs_booking ON jobs (booking_id);

-- A process on a card its owner had not booked. Open while last seen in the latest pass.
CREATE TABLE violations (
    id            INTEGER PRIMARY KEY,
    node          TEXT    NOT NULL,
    gpu_uuid      TEXT    NOT NULL,
    pid           INTEGER NOT NULL,
    unix_user     TEXT,              -- the process owner, as /proc says
    user_id       INTEGER REFERENCES users(id),  -- the Lanes user of that account, if any
    command       TEXT,
    memory_bytes  INTEGER,
    first_seen_ms INTEGER NOT NULL,
    last_seen_ms  INTEGER NOT NULL,
    ended_ms      INTEGER,           -- gone from the card (NULL while it is there)
    -- observed | warned | terminated (SIGTERM sent) | killed (SIGKILL sent)
    action        TEXT    NOT NULL DEFAULT 'observed'
);
CREATE INDEX violations_open ON violations (ended_ms, node, gpu_uuid, pid);
CREATE INDEX violations_user ON violations (user_id, first_seen_ms);

-- Idle bookings: when the watchdog found its cards idle for the whole window (NULL: not idle).
ALTER TABLE bookings ADD COLUMN idle_since_ms INTEGER;
