-- Several nodes on one database (issue 17): what each node registered and when it last
-- answered, which of its cards Lanes manages, and jobs' output kept in the database so that
-- any portal can show a log whatever node ran the job.
ALTER TABLE nodes ADD COLUMN address TEXT NOT NULL DEFAULT '';
ALTER TABLE nodes ADD COLUMN version TEXT NOT NULL DEFAULT '';
ALTER TABLE nodes ADD COLUMN driver TEXT NOT NULL DEFAULT '';
ALTER TABLE nodes ADD COLUMN gpu_source TEXT NOT NULL DEFAULT 'simulated';
-- Unix milliseconds of its latest heartbeat (0: never, as for rows older than this migration).
ALTER TABLE nodes ADD COLUMN heartbeat_ms INTEGER NOT NULL DEFAULT 0;
-- The process now serving as this node (a random id): a second process that claims the name
-- while the first still heartbeats is refused.
ALTER TABLE nodes ADD COLUMN instance TEXT NOT NULL DEFAULT '';
-- Its latest tick (JSON), so that a portal started while the node is silent shows its last values.
ALTER TABLE nodes ADD COLUMN last_tick TEXT;

-- 0: seen on its node but left out of Lanes there (`--gpus nvml:0,2` names the managed ones).
ALTER TABLE gpus ADD COLUMN managed INTEGER NOT NULL DEFAULT 1;

CREATE TABLE job_log_chunks (
    job_id        INTEGER NOT NULL REFERENCES jobs(id) ON DELETE CASCADE,
    stream        TEXT    NOT NULL CHECK (stream IN ('stdout', 'stderr')),
    offset_bytes  INTEGER NOT NULL,
    data          BLOB    NOT NULL,
    PRIMARY KEY (job_id, stream, offset_bytes)
);
