-- Bookings of cards for time slots, maintenance blocks, and fairness quotas.
-- Times are UTC milliseconds since the epoch, so that interval comparisons are plain integer
-- comparisons. A slot is [start_ms, end_ms). No two live bookings (or a booking and a
-- maintenance block) overlap on one card: the store checks and inserts in one IMMEDIATE
-- transaction (the PostgreSQL backend will use an exclusion constraint instead).
CREATE TABLE bookings (
    id            INTEGER PRIMARY KEY,
    user_id       INTEGER NOT NULL REFERENCES users(id),
    start_ms      INTEGER NOT NULL,
    end_ms        INTEGER NOT NULL,
    note          TEXT    NOT NULL DEFAULT '',
    -- live: holds its cards for [start_ms, end_ms); cancelled: never ran; released: given back
    -- early (end_ms was moved to the moment of release).
    status        TEXT    NOT NULL DEFAULT 'live' CHECK (status IN ('live', 'cancelled', 'released')),
    created_at    TEXT    NOT NULL,
    created_by    INTEGER REFERENCES users(id),
    CHECK (end_ms > start_ms)
);
CREATE INDEX bookings_user ON bookings (user_id, end_ms);

CREATE TABLE booking_gpus (
    booking_id  INTEGER NOT NULL REFERENCES bookings(id) ON DELETE CASCADE,
    gpu_id      INTEGER NOT NULL REFERENCES gpus(id),
    -- Copies of the booking's slot and liveness, so the overlap check is one indexed lookup.
    start_ms    INTEGER NOT NULL,
    end_ms      INTEGER NOT NULL,
    live        INTEGER NOT NULL DEFAULT 1,
    PRIMARY KEY (booking_id, gpu_id)
);
CREATE INDEX booking_gpus_slot ON booking_gpus (gpu_id, live, start_ms, end_ms);

CREATE TABLE maintenance (
    id          INTEGER PRIMARY KEY,
    start_ms    INTEGER NOT NULL,
    end_ms      INTEGER NOT NULL,
    reason      TEXT    NOT NULL DEFAULT '',
    created_at  TEXT    NOT NULL,
    created_by  INTEGER REFERENCES users(id),
    CHECK (end_ms > start_ms)
);

CREATE TABLE maintenance_gpus (
    maintenance_id  INTEGER NOT NULL REFERENCES maintenance(id) ON DELETE CASCADE,
    gpu_id          INTEGER NOT NULL REFERENCES gpus(id),
    start_ms        INTEGER NOT NULL,
    end_ms          INTEGER NOT NULL,
    PRIMARY KEY (maintenance_id, gpu_id)
);
CREATE INDEX maintenance_gpus_slot ON maintenance_gpus (gpu_id, start_ms, end_ms);

-- One row per scope: ('default', ''), ('group', name) or ('user', name). NULL: no limit here.
CREATE TABLE quotas (
    scope               TEXT    NOT NULL CHECK (scope IN ('default', 'group', 'user')),
    name                TEXT    NOT NULL DEFAULT '',
    max_gpus            INTEGER,
    gpu_hours_per_week  REAL,
    max_booking_hours   REAL,
    max_days_ahead      REAL,
    max_upcoming        INTEGER,
    PRIMARY KEY (scope, name)
);
