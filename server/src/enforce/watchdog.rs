//! Who may be on a card (pure): every process a card lists is matched to a Lanes job (by its
//! cgroup behind the device wall, which nothing inside can leave; else by its session: a job
//! leads its own), to its owner's active booking of the card, or to the admins' exemptions.
//! Anything else is unbooked use, and the tracker follows each such process from
//! first sight to its end, deciding when `terminate` signals it.

use lanes_types::enforcement::{Policy, ViolationAction, WatchdogMode};
use lanes_types::{GpuProcess, ProcessLane};
use std::collections::{HashMap, HashSet};

/// A running Lanes job: its session leader's pid and its booking's cards.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunningJob {
    pub id: i64,
    pub cards: Vec<String>,
    /// Its cgroup behind the device wall, as `/proc/PID/cgroup` names it.
    pub cgroup: Option<String>,
}

/// What the watchdog knows at one pass.
#[derive(Clone, Debug, Default)]
pub struct Facts {
    /// Card UUID → the Lanes user holding an active booking of it.
    pub holders: HashMap<String, i64>,
    /// Unix account → Lanes user.
    pub accounts: HashMap<String, i64>,
    /// Session leader pid → the job.
    pub jobs: HashMap<u32, RunningJob>,
    pub exempt_users: HashSet<String>,
    /// Absolute paths of exempt executables.
    pub exempt_commands: HashSet<String>,
}

impl Facts {
    /// Whose process this is (`session`: its session id, `cgroup`: its cgroup, `exe`: the path
    /// of its executable, when /proc shows them), as a lane.
    pub fn classify(
        &self,
        card: &str,
        process: &GpuProcess,
        session: Option<u32>,
        cgroup: Option<&str>,
        exe: Option<&str>,
    ) -> ProcessLane {
        if process.simulated {
            return ProcessLane::Simulated;
        }
        let job = cgroup
            .and_then(|path| {
                self.jobs
                    .values()
                    .find(|j| j.cgroup.as_deref() == Some(path))
            })
            .or_else(|| self.jobs.get(&process.pid))
            .or_else(|| session.and_then(|s| self.jobs.get(&s)));
        if let Some(job) = job.filter(|j| j.cards.iter().any(|c| c == card)) {
            return ProcessLane::Job { id: job.id };
        }
        let exempt = |set: &HashSet<String>, name: &Option<String>| {
            name.as_ref().is_some_and(|n| set.contains(n))
        };
        if exempt(&self.exempt_users, &process.user)
            || exe.is_some_and(|path| self.exempt_commands.contains(path))
        {
            return ProcessLane::Exempt;
        }
        let owner = process.user.as_ref().and_then(|u| self.accounts.get(u));
        match (owner, self.holders.get(card)) {
            (Some(owner), Some(holder)) if owner == holder => ProcessLane::Booked,
            _ => ProcessLane::Unbooked,
        }
    }
}

/// A violation the tracker follows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Open {
    pub id: i64,
    pub first_seen_ms: i64,
    pub action: ViolationAction,
    /// When the last signal was sent.
    pub signalled_ms: Option<i64>,
}

/// A card (UUID) and a pid: one process on one card.
pub type Key = (String, u32);

/// What to do after one pass.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Plan {
    /// Unbooked processes seen for the first time: record them (and warn, unless observing).
    pub new: Vec<Key>,
    /// Still there: refresh their last sighting.
    pub seen: Vec<i64>,
    /// Gone: close them.
    pub ended: Vec<(Key, i64)>,
    /// Signals due under `terminate`: SIGTERM (`Terminated`) or SIGKILL (`Killed`).
    pub signals: Vec<(Key, i64, ViolationAction)>,
}

#[derive(Debug, Default)]
pub struct Tracker {
    pub open: HashMap<Key, Open>,
}

impl Tracker {
    /// Compares the unbooked processes seen now with the open violations.
    pub fn plan(&mut self, unbooked: &HashSet<Key>, policy: &Policy, now_ms: i64) -> Plan {
        let mut plan = Plan::default();
        let grace_ms = policy.violation_grace_s as i64 * 1000;
        for (key, open) in &mut self.open {
            if !unbooked.contains(key) {
                plan.ended.push((key.clone(), open.id));
                continue;
            }
            plan.seen.push(open.id);
            if policy.watchdog != WatchdogMode::Terminate {
                continue;
            }
            let next = match (open.action, open.signalled_ms) {
                (ViolationAction::Terminated, Some(at)) if now_ms - at >= grace_ms => {
                    Some(ViolationAction::Killed)
                }
                (ViolationAction::Observed | ViolationAction::Warned, _)
                    if now_ms - open.first_seen_ms >= grace_ms =>
                {
                    Some(ViolationAction::Terminated)
                }
                _ => None,
            };
            if let Some(action) = next {
                open.action = action;
                open.signalled_ms = Some(now_ms);
                plan.signals.push((key.clone(), open.id, action));
            }
        }
        for (key, _) in &plan.ended {
            self.open.remove(key);
        }
        plan.new = unbooked
            .iter()
            .filter(|k| !self.open.contains_key(*k))
            .cloned()
            .collect();
        plan.new.sort();
        plan
    }

    /// Starts following a violation once it is recorded.
    pub fn opened(&mut self, key: Key, id: i64, action: ViolationAction, now_ms: i64) {
        self.open.insert(
            key,
            Open {
                id,
                first_seen_ms: now_ms,
                action,
                signalled_ms: None,
            },
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn process(pid: u32, user: &str, command: &str) -> GpuProcess {
        GpuProcess {
            pid,
            used_memory_bytes: Some(1 << 30),
            user: Some(user.into()),
            command: Some(command.into()),
            lane: None,
            sm_pct: None,
            mem_pct: None,
            simulated: false,
            container: None,
        }
    }

    fn facts() -> Facts {
        let mut f = Facts::default();
        f.holders.insert("GPU-A".into(), 1);
        f.accounts.insert("alice".into(), 1);
        f.accounts.insert("bob".into(), 2);
        f.jobs.insert(
            500,
            RunningJob {
                id: 9,
                cards: vec!["GPU-A".into()],
                cgroup: Some("/lanes/job-9-a1b2c3".into()),
            },
        );
        f.exempt_users.insert("monitor".into());
        f.exempt_commands
            .insert("/usr/bin/nvidia-persistenced".into());
        f
    }

    #[test]
    fn a_jobs_process_is_its_jobs_on_its_cards_by_cgroup_pid_or_session_and_nowhere_else() {
        let f = facts();
        let p = process(501, "alice", "python");
        assert_eq!(
            f.classify("GPU-A", &p, Some(500), None, None),
            ProcessLane::Job { id: 9 }
        );
        assert_eq!(
            f.classify("GPU-A", &process(500, "alice", "bash"), None, None, None),
            ProcessLane::Job { id: 9 }
        );
        // The same job's process on a card outside its booking is not covered by the job;
        // alice holds no booking of GPU-B.
        assert_eq!(
            f.classify("GPU-B", &p, Some(500), None, None),
            ProcessLane::Unbooked
        );
        // A process that left the job's session (setsid, a double fork) is still the job's
        // while it is in the job's cgroup.
        let escaped = process(777, "alice", "python");
        assert_eq!(
            f.classify(
                "GPU-A",
                &escaped,
                Some(777),
                Some("/lanes/job-9-a1b2c3"),
                None
            ),
            ProcessLane::Job { id: 9 }
        );
        assert_eq!(
            f.classify("GPU-A", &escaped, Some(777), None, None),
            ProcessLane::Booked
        );
    }

    #[test]
    fn holders_may_use_their_card_others_may_not_unless_exempt() {
        let f = facts();
        assert_eq!(
            f.classify("GPU-A", &process(7, "alice", "python"), None, None, None),
            ProcessLane::Booked
        );
        assert_eq!(
            f.classify("GPU-A", &process(8, "bob", "python"), None, None, None),
            ProcessLane::Unbooked
        );
        assert_eq!(
            f.classify("GPU-B", &process(8, "stranger", "python"), None, None, None),
            ProcessLane::Unbooked
        );
        assert_eq!(
            f.classify("GPU-B", &process(9, "monitor", "dcgm"), None, None, None),
            ProcessLane::Exempt
        );
        let daemon = process(10, "root", "nvidia-persistenced");
        assert_eq!(
            f.classify(
                "GPU-B",
                &daemon,
                None,
                None,
                Some("/usr/bin/nvidia-persistenced")
            ),
            ProcessLane::Exempt
        );
        // A copy of anything renamed to the exempt name is not exempt: its path differs.
        let renamed = process(12, "stranger", "nvidia-persistenced");
        assert_eq!(
            f.classify(
                "GPU-B",
                &renamed,
                None,
                None,
                Some("/home/stranger/nvidia-persistenced")
            ),
            ProcessLane::Unbooked
        );
        assert_eq!(
            f.classify("GPU-B", &renamed, None, None, None),
            ProcessLane::Unbooked
        );
        let unknown_owner = GpuProcess {
            user: None,
            ..process(11, "x", "python")
        };
        assert_eq!(
            f.classify("GPU-A", &unknown_owner, None, None, None),
            ProcessLane::Unbooked
        );
    }

    fn policy(mode: WatchdogMode, grace_s: u64) -> Policy {
        Policy {
            watchdog: mode,
            violation_grace_s: grace_s,
            ..Policy::default()
        }
    }

    #[test]
    fn terminate_sends_sigterm_after_the_grace_then_sigkill_after_another() {
        let key: Key = ("GPU-B".into(), 42);
        let seen: HashSet<Key> = [key.clone()].into();
        let p = policy(WatchdogMode::Terminate, 10);
        let mut t = Tracker::default();
        let plan = t.plan(&seen, &p, 0);
        assert_eq!(plan.new, vec![key.clone()]);
        t.opened(key.clone(), 1, ViolationAction::Warned, 0);
        assert!(t.plan(&seen, &p, 9_999).signals.is_empty());
        let plan = t.plan(&seen, &p, 10_000);
        assert_eq!(
            plan.signals,
            vec![(key.clone(), 1, ViolationAction::Terminated)]
        );
        assert!(t.plan(&seen, &p, 19_999).signals.is_empty());
        assert_eq!(
            t.plan(&seen, &p, 20_000).signals,
            vec![(key.clone(), 1, ViolationAction::Killed)]
        );
        assert!(t.plan(&seen, &p, 60_000).signals.is_empty());
        let plan = t.plan(&HashSet::new(), &p, 61_000);
        assert_eq!(plan.ended, vec![(key, 1)]);
        assert!(t.open.is_empty());
    }

    #[test]
    fn observe_and_warn_never_signal() {
        let key: Key = ("GPU-B".into(), 42);
        let seen: HashSet<Key> = [key.clone()].into();
        for mode in [WatchdogMode::Observe, WatchdogMode::Warn] {
            let mut t = Tracker::default();
            t.opened(key.clone(), 1, ViolationAction::Observed, 0);
            let plan = t.plan(&seen, &policy(mode, 0), 1_000_000);
            assert!(plan.signals.is_empty());
            assert_eq!(plan.seen, vec![1]);
        }
    }
}
