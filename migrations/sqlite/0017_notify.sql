-- Personal notifications (issue 21); the same change as ../postgres/0005_notify.sql.
-- What each member chose (a JSON document: time zone, webhook, channels per event).
CREATE TABLE notify_prefs (
    user_id  INTEGER PRIMARY KEY REFERENCES users(id),
    value    TEXT    NOT NULL
);
-- Every message to send, one row per channel: it survives a restart and is sent once. Times are
-- UTC milliseconds. A reminder's `dedupe_key` makes asking twice (two nodes, two passes) a no-op.
CREATE TABLE outbox (
    id                INTEGER PRIMARY KEY,
    user_id           INTEGER REFERENCES users(id),
    channel           TEXT    NOT NULL CHECK (channel IN ('email', 'webhook', 'lab')),
    event             TEXT    NOT NULL,
    text              TEXT    NOT NULL,
    details           TEXT    NOT NULL,
    dedupe_key        TEXT    UNIQUE,
    status            TEXT    NOT NULL DEFAULT 'pending'
                              CHECK (status IN ('pending', 'sent', 'failed', 'suppressed')),
    attempts          INTEGER NOT NULL DEFAULT 0,
    created_ms        INTEGER NOT NULL,
    next_ms           INTEGER NOT NULL,
    claimed_until_ms  INTEGER,
    sent_ms           INTEGER,
    last_error        TEXT
);
CREATE INDEX outbox_due ON outbox (status, next_ms);
CREATE INDEX outbox_user_sent ON outbox (user_id, sent_ms);
-- One-click answers in messages: kept by the hash of their secret, for one action on one
-- booking or job of one member; they expire and work once.
CREATE TABLE action_links (
    id          INTEGER PRIMARY KEY,
    token_hash  TEXT    NOT NULL UNIQUE,
    outbox_id   INTEGER REFERENCES outbox(id),
    user_id     INTEGER NOT NULL REFERENCES users(id),
    action      TEXT    NOT NULL,
    booking_id  INTEGER REFERENCES bookings(id),
    job_id      INTEGER REFERENCES jobs(id),
    created_ms  INTEGER NOT NULL,
    expires_ms  INTEGER NOT NULL,
    used_ms     INTEGER,
    outcome     TEXT
);
CREATE INDEX action_links_outbox ON action_links (outbox_id);
-- "Still using it": the idle watch starts a new window from here.
ALTER TABLE bookings ADD COLUMN in_use_ms INTEGER;
