-- Every delivery attempt of a member's message (issue 38); the same change as
-- ../sqlite/0019_delivery_attempts.sql. A member's hourly limit counts attempts, not
-- deliveries: a failing endpoint retried 8 times must not turn one member's messages into an
-- unbounded stream of requests. Pruned with the outbox.
CREATE TABLE delivery_attempts (
    user_id  BIGINT NOT NULL,
    at_ms    BIGINT NOT NULL
);
CREATE INDEX delivery_attempts_user ON delivery_attempts (user_id, at_ms);
