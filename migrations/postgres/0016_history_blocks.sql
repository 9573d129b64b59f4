-- Raw readings in compressed blocks (server/src/history/block.rs): one row per card and
-- half-hour window, written every ten minutes once they are rolled up into minutes (a window's
-- block is extended as it fills). `samples_raw` keeps the head: readings not yet in a block.
-- `t0`: the window's start; `t1`: where the pass that last wrote it ended (the head begins at
-- the newest).
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
CREATE INDEX samples_blocks_t1 ON samples_blocks (t1);
-- Blocks are already compressed: PostgreSQL should not try to compress them again.
ALTER TABLE samples_blocks ALTER COLUMN data SET STORAGE EXTERNAL;
