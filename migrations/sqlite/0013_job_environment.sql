-- Jobs in the user's own environment and behind a device wall (issue 15).
--
-- `env_base`: what the job's environment starts from, as the request said (JSON of
-- `EnvironmentBase`); NULL: the admin's default when it starts. `environment` and `device_wall`
-- say in words what it got; `cgroup` is its cgroup's path (so a restarted server can still kill
-- what is left of it); CPU time and peak host memory come from that cgroup.
ALTER TABLE jobs ADD COLUMN env_base TEXT;
ALTER TABLE jobs ADD COLUMN environment TEXT;
ALTER TABLE jobs ADD COLUMN device_wall TEXT;
ALTER TABLE jobs ADD COLUMN cgroup TEXT;
ALTER TABLE jobs ADD COLUMN cpu_time_ms INTEGER;
ALTER TABLE jobs ADD COLUMN peak_host_memory_bytes INTEGER;
