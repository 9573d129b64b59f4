-- Loans across bookings (issue 45); the same change as ../sqlite/0025_wide_loans.sql.
-- A loan's card rows (lane 1) each name the booking that lends that card (`lent_by`): a wide
-- queue job may borrow the idle cards of several bookings on one node, and any of their
-- holders' return ends the loan (its other hosts' cards are free to lend again at once).
ALTER TABLE booking_gpus ADD COLUMN lent_by BIGINT REFERENCES bookings(id);
UPDATE booking_gpus SET lent_by = (SELECT b.loan_of FROM bookings b WHERE b.id = booking_gpus.booking_id)
 WHERE lane = 1;
CREATE INDEX booking_gpus_lent_by ON booking_gpus (lent_by) WHERE lent_by IS NOT NULL;
