-- Idle booked cards lent to the queue (issue 20); the same change as ../sqlite/0016_lending.sql.
ALTER TABLE bookings ADD COLUMN lend BIGINT NOT NULL DEFAULT 0;
ALTER TABLE bookings ADD COLUMN loan_of BIGINT REFERENCES bookings(id);
CREATE INDEX bookings_loan_of ON bookings (loan_of);
ALTER TABLE booking_gpus ADD COLUMN lane BIGINT NOT NULL DEFAULT 0;
-- Holds overlap nothing in their lane: two bookings never hold a card at once, nor two loans;
-- a loan lies inside its host's slot on the host's cards (the store checks that as it lends).
ALTER TABLE booking_gpus DROP CONSTRAINT booking_gpus_no_overlap;
ALTER TABLE booking_gpus ADD CONSTRAINT booking_gpus_no_overlap
    EXCLUDE USING gist (gpu_id WITH =, lane WITH =, int8range(start_ms, end_ms) WITH &&)
    WHERE (live = 1);
ALTER TABLE jobs ADD COLUMN preemptible BIGINT NOT NULL DEFAULT 0;
ALTER TABLE jobs ADD COLUMN requeues BIGINT NOT NULL DEFAULT 0;
