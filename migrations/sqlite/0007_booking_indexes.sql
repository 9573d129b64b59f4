-- Overlap checks ask "live holds of this card that end after the new start and start before
-- its end". Most holds lie in the past, so leading with the end bounds the scan to the ones
-- still to come (the start index scanned every earlier booking of the card).
DROP INDEX booking_gpus_slot;
CREATE INDEX booking_gpus_slot ON booking_gpus (gpu_id, live, end_ms);
DROP INDEX maintenance_gpus_slot;
CREATE INDEX maintenance_gpus_slot ON maintenance_gpus (gpu_id, end_ms);
CREATE INDEX bookings_end ON bookings (end_ms);
