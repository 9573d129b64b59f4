-- Projects and statements (issue 47).
--
-- `bookings.project`: the project a booking is for, one the admins defined in the portal
-- settings (by name); NULL: none. Statements count its GPU-hours, energy and cost there.
ALTER TABLE bookings ADD COLUMN project TEXT;
