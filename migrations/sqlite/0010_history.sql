-- Utilization history: every card's readings, compactly, with rollups for long ranges.
-- Times are Unix seconds. Readings are integers: memory in MiB, power in tenths of a watt.
-- Tables are WITHOUT ROWID, clustered on (gpu_id, t): one card's range is one contiguous read.

-- One row per card per second (the poll interval; faster polls keep the last reading of a
-- second). Kept 48 h by default.
CREATE TABLE samples_raw (
    gpu_id      INTEGER NOT NULL REFERENCES gpus(id),
    t           INTEGER NOT NULL,
    util        INTEGER NOT NULL,
    mem_mib     INTEGER NOT NULL,
    temp_c      INTEGER,
    power_dw    INTEGER,
    clock_mhz   INTEGER,
    PRIMARY KEY (gpu_id, t)
) WITHOUT ROWID;

-- Buckets of 60 s (kept 90 days), 600 s and 3600 s (kept forever), `t` the bucket's start:
-- ten-minute buckets let a week or a month at a thousand points be read from a few thousand
-- rows per card instead of tens of thousands. Each metric
-- keeps min, sum and max, and the optional ones their own count, so that buckets merge exactly
-- (a coarser bucket's average is the sum of sums over the sum of counts).
CREATE TABLE samples_1m (
    gpu_id INTEGER NOT NULL REFERENCES gpus(id), t INTEGER NOT NULL, n INTEGER NOT NULL,
    util_min INTEGER NOT NULL, util_sum INTEGER NOT NULL, util_max INTEGER NOT NULL,
    mem_min INTEGER NOT NULL, mem_sum INTEGER NOT NULL, mem_max INTEGER NOT NULL,
    temp_n INTEGER NOT NULL, temp_min INTEGER, temp_sum INTEGER, temp_max INTEGER,
    power_n INTEGER NOT NULL, power_min INTEGER, power_sum INTEGER, power_max INTEGER,
    clock_n INTEGER NOT NULL, clock_min INTEGER, clock_sum INTEGER, clock_max INTEGER,
    PRIMARY KEY (gpu_id, t)
) WITHOUT ROWID;

CREATE TABLE samples_10m (
    gpu_id INTEGER NOT NULL REFERENCES gpus(id), t INTEGER NOT NULL, n INTEGER NOT NULL,
    util_min INTEGER NOT NULL, util_sum INTEGER NOT NULL, util_max INTEGER NOT NULL,
    mem_min INTEGER NOT NULL, mem_sum INTEGER NOT NULL, mem_max INTEGER NOT NULL,
    temp_n INTEGER NOT NULL, temp_min INTEGER, temp_sum INTEGER, temp_max INTEGER,
    power_n INTEGER NOT NULL, power_min INTEGER, power_sum INTEGER, power_max INTEGER,
    clock_n INTEGER NOT NULL, clock_min INTEGER, clock_sum INTEGER, clock_max INTEGER,
    PRIMARY KEY (gpu_id, t)
) WITHOUT ROWID;

CREATE TABLE samples_1h (
    gpu_id INTEGER NOT NULL REFERENCES gpus(id), t INTEGER NOT NULL, n INTEGER NOT NULL,
    util_min INTEGER NOT NULL, util_sum INTEGER NOT NULL, util_max INTEGER NOT NULL,
    mem_min INTEGER NOT NULL, mem_sum INTEGER NOT NULL, mem_max INTEGER NOT NULL,
    temp_n INTEGER NOT NULL, temp_min INTEGER, temp_sum INTEGER, temp_max INTEGER,
    power_n INTEGER NOT NULL, power_min INTEGER, power_sum INTEGER, power_max INTEGER,
    clock_n INTEGER NOT NULL, clock_min INTEGER, clock_sum INTEGER, clock_max INTEGER,
    PRIMARY KEY (gpu_id, t)
) WITHOUT ROWID;

-- How far each rollup has got: every bucket that starts before `done_until` is final.
CREATE TABLE history_progress (
    level       TEXT    PRIMARY KEY CHECK (level IN ('1m', '10m', '1h')),
    done_until  INTEGER NOT NULL
);
