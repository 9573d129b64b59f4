-- Raw readings in compressed blocks (server/src/history/block.rs): one row per card and
-- half-hour window once the window is rolled up into minutes. `samples_raw` keeps the head:
-- readings not yet in a block. `t0`: the window's start; `t1`: its last reading's time.
CREATE TABLE samples_blocks (
    gpu_id  BIGINT NOT NULL REFERENCES gpus(id),
    t0      BIGINT NOT NULL,
    t1      BIGINT NOT NULL,
    n       BIGINT NOT NULL,
    data    BYTEA  NOT NULL,
    PRIMARY KEY (gpu_id, t0)
);
-- Compaction finds where the head begins from the newest block of any card; retention
-- selects a time range over every card (see samples_raw_t).
CREATE INDEX samples_blocks_t0 ON samples_blocks (t0);
-- Blocks are written once and rarely rewritten: already compressed, so PostgreSQL should
-- not try to compress them again.
ALTER TABLE samples_blocks ALTER COLUMN data SET STORAGE EXTERNAL;
