-- Several nodes on one database (issue 17); the same change as ../sqlite/0014_pool.sql.
ALTER TABLE nodes ADD COLUMN address TEXT NOT NULL DEFAULT '';
ALTER TABLE nodes ADD COLUMN version TEXT NOT NULL DEFAULT '';
ALTER TABLE nodes ADD COLUMN driver TEXT NOT NULL DEFAULT '';
ALTER TABLE nodes ADD COLUMN gpu_source TEXT NOT NULL DEFAULT 'simulated';
ALTER TABLE nodes ADD COLUMN heartbeat_ms BIGINT NOT NULL DEFAULT 0;
ALTER TABLE nodes ADD COLUMN instance TEXT NOT NULL DEFAULT '';
ALTER TABLE nodes ADD COLUMN last_tick TEXT;

ALTER TABLE gpus ADD COLUMN managed BIGINT NOT NULL DEFAULT 1;

CREATE TABLE job_log_chunks (
    job_id        BIGINT NOT NULL REFERENCES jobs(id) ON DELETE CASCADE,
    stream        TEXT   NOT NULL CHECK (stream IN ('stdout', 'stderr')),
    offset_bytes  BIGINT NOT NULL,
    data          BYTEA  NOT NULL,
    PRIMARY KEY (job_id, stream, offset_bytes)
);
