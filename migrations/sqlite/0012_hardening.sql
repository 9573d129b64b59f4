-- Hardening (issue 13).
--
-- Each job's logs live in a directory made for it alone, named here; a job id that comes back
-- (a database restored or recreated) never shows another job's log. Jobs that already ran keep
-- the directory named by their id; a job that has not started has none yet.
ALTER TABLE jobs ADD COLUMN log_dir TEXT;
UPDATE jobs SET log_dir = CAST(id AS TEXT) WHERE started_at IS NOT NULL;

-- Login attempts, counted before the password is checked so that concurrent guesses cannot
-- all slip under the limit. `ok` is NULL while the check runs, then 1 or 0.
CREATE TABLE login_attempts (
    id          INTEGER PRIMARY KEY,
    username    TEXT    NOT NULL,
    remote_addr TEXT    NOT NULL,
    at_ms       INTEGER NOT NULL,
    ok          INTEGER
);
CREATE INDEX login_attempts_user ON login_attempts (username, at_ms);
CREATE INDEX login_attempts_addr ON login_attempts (remote_addr, at_ms);
