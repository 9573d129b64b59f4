-- Jobs in containers, and processes in containers told apart (issue 42). The same change as
-- ../sqlite/0021_containers.sql.
ALTER TABLE jobs ADD COLUMN container TEXT;
ALTER TABLE violations ADD COLUMN container TEXT;
