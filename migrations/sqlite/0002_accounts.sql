-- Accounts: people, the Unix account their jobs run as, their role, and teams.
CREATE TABLE users (
    id                   INTEGER PRIMARY KEY,
    username             TEXT    NOT NULL UNIQUE,
    display_name         TEXT    NOT NULL,
    email                TEXT,
    unix_user            TEXT,
    role                 TEXT    NOT NULL CHECK (role IN ('admin', 'user')),
    enabled              INTEGER NOT NULL DEFAULT 1 CHECK (enabled IN (0, 1)),
    password_hash        TEXT    NOT NULL,
    password_changed_at  TEXT    NOT NULL,
    created_at           TEXT    NOT NULL
);

CREATE TABLE groups (
    id           INTEGER PRIMARY KEY,
    name         TEXT    NOT NULL UNIQUE,
    description  TEXT    NOT NULL DEFAULT '',
    created_at   TEXT    NOT NULL
);

CREATE TABLE group_members (
    group_id  INTEGER NOT NULL REFERENCES groups(id) ON DELETE CASCADE,
    user_id   INTEGER NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    PRIMARY KEY (group_id, user_id)
);

-- Who did what: logins, token and role changes. actor_user_id is NULL for the operator's CLI.
CREATE TABLE audit_log (
    id             INTEGER PRIMARY KEY,
    at             TEXT    NOT NULL,
    actor_user_id  INTEGER REFERENCES users(id),
    action         TEXT    NOT NULL,
    target         TEXT    NOT NULL DEFAULT '',
    detail         TEXT    NOT NULL DEFAULT '',
    remote_addr    TEXT
);
CREATE INDEX audit_log_at ON audit_log (at);
