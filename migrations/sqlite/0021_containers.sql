-- Jobs in containers, and processes in containers told apart (issue 42).
--
-- `jobs.container`: the image and options a job runs with (JSON of `ContainerSpec`); NULL for a
-- plain job. `violations.container`: the container an unbooked process ran in (JSON of
-- `ContainerRef`), so that a violation names it instead of the runtime's root.
ALTER TABLE jobs ADD COLUMN container TEXT;
ALTER TABLE violations ADD COLUMN container TEXT;
