-- Interactive sessions in bookings (issue 46).
--
-- `jobs.session`: the kind of session a job is ("jupyter": the member's own Jupyter, which the
-- portal serves at /sessions/ID/); NULL for a command run to its end, and for `lanes shell`,
-- which is the member's own terminal and needs no portal.
ALTER TABLE jobs ADD COLUMN session TEXT;
