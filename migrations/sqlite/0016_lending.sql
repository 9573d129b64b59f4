-- Idle booked cards lent to the queue (issue 20); the same change as ../postgres/0004_lending.sql.
-- A booking may allow lending (`lend`). A loan is a booking of the borrower's queue job on
-- cards of an idle lending booking (`loan_of`), inside its slot; its card rows are in lane 1,
-- where holds overlap only other loans (the host's lane-0 rows hold the cards for everyone else).
ALTER TABLE bookings ADD COLUMN lend INTEGER NOT NULL DEFAULT 0;
ALTER TABLE bookings ADD COLUMN loan_of INTEGER REFERENCES bookings(id);
CREATE INDEX bookings_loan_of ON bookings (loan_of);
ALTER TABLE booking_gpus ADD COLUMN lane INTEGER NOT NULL DEFAULT 0;
-- Queue jobs that may run on lent cards, and how often one was sent back to the queue.
ALTER TABLE jobs ADD COLUMN preemptible INTEGER NOT NULL DEFAULT 0;
ALTER TABLE jobs ADD COLUMN requeues INTEGER NOT NULL DEFAULT 0;
