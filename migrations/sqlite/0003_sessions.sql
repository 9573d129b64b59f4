-- Browser sessions. Only a SHA-256 of the cookie value is stored, so a database leak does not
-- leak live sessions.
CREATE TABLE sessions (
    id_hash       TEXT    PRIMARY KEY,
    user_id       INTEGER NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    created_at    TEXT    NOT NULL,
    last_seen_at  TEXT    NOT NULL,
    remote_addr   TEXT
);
CREATE INDEX sessions_user ON sessions (user_id);

-- Lockout counts recent failed logins per account and per address from the audit log.
CREATE INDEX audit_log_action_at ON audit_log (action, at);
