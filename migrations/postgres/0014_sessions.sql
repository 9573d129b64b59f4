-- Interactive sessions in bookings (issue 46); the same change as ../sqlite/0026_sessions.sql.
-- `jobs.session`: the kind of session a job is ("jupyter", served at /sessions/ID/), or NULL.
ALTER TABLE jobs ADD COLUMN session TEXT;
