-- Energy and per-process use (issue 20); the same change as ../sqlite/0015_usage.sql.
CREATE TABLE energy_1m (
    gpu_id  BIGINT NOT NULL REFERENCES gpus(id),
    t       BIGINT NOT NULL,
    mj      BIGINT NOT NULL,
    PRIMARY KEY (gpu_id, t)
);
CREATE INDEX energy_1m_t ON energy_1m (t);

CREATE TABLE process_use_1m (
    gpu_id       BIGINT NOT NULL REFERENCES gpus(id),
    t            BIGINT NOT NULL,
    unix_user    TEXT   NOT NULL,
    job_id       BIGINT NOT NULL,
    ms           BIGINT NOT NULL,
    used_pct_ms  BIGINT NOT NULL,
    sm_pct_ms    BIGINT NOT NULL,
    mem_pct_ms   BIGINT NOT NULL,
    mj           BIGINT NOT NULL,
    PRIMARY KEY (gpu_id, t, unix_user, job_id)
);
CREATE INDEX process_use_1m_t ON process_use_1m (t);
