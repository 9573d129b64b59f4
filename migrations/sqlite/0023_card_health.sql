-- Card health (issue 44): each card's verdict from its error counters and Xid events, and the
-- changes of it (the history page's timeline).
--
-- `card_health`: one row per card that was ever judged other than healthy; `findings` is the
-- JSON list of reasons, `counters` the error counters at the last change (the baseline growth
-- is measured against after a restart), `drain_id` the open-ended maintenance block that took
-- the card out of service, if any.
CREATE TABLE card_health (
    gpu_id      INTEGER PRIMARY KEY REFERENCES gpus(id),
    level       TEXT    NOT NULL CHECK (level IN ('healthy', 'degraded', 'failing')),
    findings    TEXT    NOT NULL DEFAULT '[]',
    counters    TEXT,
    since_ms    INTEGER NOT NULL,
    drain_id    INTEGER REFERENCES maintenance(id) ON DELETE SET NULL
);

-- `cause`: `seen` (a reading), `cleared` (an admin, `by_user`), `reset` (counters read clean
-- after a reset), `process` (an application's Xid, told about its process).
CREATE TABLE health_changes (
    id          INTEGER PRIMARY KEY,
    gpu_id      INTEGER NOT NULL REFERENCES gpus(id),
    at_ms       INTEGER NOT NULL,
    level       TEXT    NOT NULL CHECK (level IN ('healthy', 'degraded', 'failing')),
    findings    TEXT    NOT NULL DEFAULT '[]',
    cause       TEXT    NOT NULL CHECK (cause IN ('seen', 'cleared', 'reset', 'process')),
    by_user     INTEGER REFERENCES users(id),
    process     TEXT
);
CREATE INDEX health_changes_gpu ON health_changes (gpu_id, at_ms);

-- A one-click move offers one card for another: which, as JSON {"from": GpuRef, "to": GpuRef}.
ALTER TABLE action_links ADD COLUMN detail TEXT;
