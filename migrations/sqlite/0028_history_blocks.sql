-- Raw readings in compressed blocks (server/src/history/block.rs): one row per card and
-- half-hour window, written every ten minutes once they are rolled up into minutes (a window's
-- block is extended as it fills). `samples_raw` keeps the head: readings not yet in a block.
-- `t0`: the window's start; `t1`: where the pass that last wrote it ended (the head begins at
-- the newest).
-- A rowid table, unlike the other history tables: SQLite keeps at most about 1 KB of a
-- WITHOUT ROWID row in its page and the rest in overflow pages of its own, which blocks of a
-- few KB left mostly empty.
CREATE TABLE samples_blocks (
    gpu_id  INTEGER NOT NULL REFERENCES gpus(id),
    t0      INTEGER NOT NULL,
    t1      INTEGER NOT NULL,
    n       INTEGER NOT NULL,
    data    BLOB    NOT NULL,
    PRIMARY KEY (gpu_id, t0)
);
-- Compaction finds where the head begins from the newest block of any card (`t1`); retention
-- selects a time range over every card (`t0`).
CREATE INDEX samples_blocks_t0 ON samples_blocks (t0);
CREATE INDEX samples_blocks_t1 ON samples_blocks (t1);
