-- Energy and per-process use (issue 20), per card and minute; the same change as
-- ../postgres/0003_usage.sql. `t` is the minute's start (Unix seconds). Rows are added to as
-- readings arrive (a minute is written by several flushes); kept as long as hourly history.

-- Energy each card drew in each minute, from its counter (or power × time without one).
CREATE TABLE energy_1m (
    gpu_id  INTEGER NOT NULL REFERENCES gpus(id),
    t       INTEGER NOT NULL,
    mj      INTEGER NOT NULL,
    PRIMARY KEY (gpu_id, t)
) WITHOUT ROWID;

-- Each card's minute split between the processes on it by their SM share, per Unix account
-- and Lanes job (0: none). `ms`: the time covered; `used_pct_ms`: the card's utilization times
-- the process's share, times milliseconds; `sm_pct_ms`, `mem_pct_ms`: the process's own
-- readings times milliseconds; `mj`: its share of the card's energy.
CREATE TABLE process_use_1m (
    gpu_id       INTEGER NOT NULL REFERENCES gpus(id),
    t            INTEGER NOT NULL,
    unix_user    TEXT    NOT NULL,
    job_id       INTEGER NOT NULL,
    ms           INTEGER NOT NULL,
    used_pct_ms  INTEGER NOT NULL,
    sm_pct_ms    INTEGER NOT NULL,
    mem_pct_ms   INTEGER NOT NULL,
    mj           INTEGER NOT NULL,
    PRIMARY KEY (gpu_id, t, unix_user, job_id)
) WITHOUT ROWID;
