-- Projects and statements (issue 47).
--
-- `bookings.project`: the project a booking is for, one the admins defined in the portal
-- settings (by name); NULL: none. Statements count its GPU-hours, energy and cost there.
-- `jobs.project`: the project a queue job named (its booking carries it once it starts); NULL:
-- its owner's group's default then. A job in a booking counts under its booking's project.
ALTER TABLE bookings ADD COLUMN project TEXT;
ALTER TABLE jobs ADD COLUMN project TEXT;
