-- Notice before a stop, and preemption by the queue (issue 45; as sqlite 0024).
--
-- `notice_request`: what a job asked of its notice (JSON: lead_s and signal; the admin's
-- defaults where absent). `notice`: the notice it was given in its current run (JSON: reason,
-- stop_at, kill_at, ...), so a restarted server neither tells it twice nor forgets when it
-- promised SIGTERM; a requeue clears it.
-- `attained_gpu_s`: GPU-seconds a queue job received in its runs before this one (least
-- attained service orders by it). `preempt_requested_ms`: when the queue asked the runner to
-- preempt the running job for a waiting one (it goes back to the queue); a requeue clears it.
ALTER TABLE jobs ADD COLUMN notice_request TEXT;
ALTER TABLE jobs ADD COLUMN notice TEXT;
ALTER TABLE jobs ADD COLUMN attained_gpu_s BIGINT NOT NULL DEFAULT 0;
ALTER TABLE jobs ADD COLUMN preempt_requested_ms BIGINT;
