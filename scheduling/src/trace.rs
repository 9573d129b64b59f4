//! Job traces for replays: `job_id,submit_s,gpus,duration_s,group` (see
//! `../shared/traces/README.md`), and how they are shaped into a workload: merged, rescaled
//! to an offered load, and given time limits.

use super::scheduler::Time;
use rand_chacha::rand_core::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// One line of a trace.
#[derive(Clone, Debug, PartialEq)]
pub struct TraceJob {
    pub id: String,
    pub submit: Time,
    pub gpus: u32,
    pub duration: Time,
    pub group: String,
}

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum TraceError {
    #[error("{file}: the header must be job_id,submit_s,gpus,duration_s,group (found {found:?})")]
    Header { file: String, found: String },
    #[error("{file} line {line}: {message}")]
    Line {
        file: String,
        line: usize,
        message: String,
    },
    #[error("{0}: the trace has no jobs")]
    Empty(String),
}

/// Parses one trace file's text; `source` names it in errors.
pub fn parse(text: &str, source: &str) -> Result<Vec<TraceJob>, TraceError> {
    let mut lines = text.lines().enumerate();
    let header = lines.next().map(|(_, l)| l.trim()).unwrap_or_default();
    if header != "job_id,submit_s,gpus,duration_s,group" {
        return Err(TraceError::Header {
            file: source.into(),
            found: header.into(),
        });
    }
    let mut jobs = Vec::new();
    for (i, line) in lines {
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        let bad = |message: String| TraceError::Line {
            file: source.into(),
            line: i + 1,
            message,
        };
        let fields: Vec<&str> = line.split(',').collect();
        let [id, submit, gpus, duration, group] = fields[..] else {
            return Err(bad(format!("expected 5 fields, found {}", fields.len())));
        };
        let number = |name: &str, v: &str| -> Result<i64, TraceError> {
            v.trim()
                .parse::<i64>()
                .ok()
                .filter(|n| *n >= 0)
                .ok_or_else(|| bad(format!("{name} must be a whole number ≥ 0, not {v:?}")))
        };
        let gpus = number("gpus", gpus)?;
        if gpus == 0 || gpus > i64::from(u32::MAX) {
            return Err(bad(format!("gpus must be at least 1, not {gpus}")));
        }
        jobs.push(TraceJob {
            id: id.trim().into(),
            submit: number("submit_s", submit)?,
            gpus: gpus as u32,
            duration: number("duration_s", duration)?.max(1),
            group: group.trim().into(),
        });
    }
    if jobs.is_empty() {
        return Err(TraceError::Empty(source.into()));
    }
    Ok(jobs)
}

/// How users' time limits relate to what their jobs really take.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Estimate {
    /// The limit is the run time: the scheduler knows the future.
    Exact,
    /// The limit is the run time times a factor drawn uniformly from [1, 3), rounded up to a
    /// minute: users over-ask, as they do.
    Noisy,
}

impl std::str::FromStr for Estimate {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "exact" => Ok(Estimate::Exact),
            "noisy" => Ok(Estimate::Noisy),
            other => Err(format!("unknown estimate {other:?}: use exact or noisy")),
        }
    }
}

/// A job ready to replay.
#[derive(Clone, Debug, PartialEq)]
pub struct SimJob {
    pub submit: Time,
    pub gpus: u32,
    pub duration: Time,
    /// What the scheduler is told (never less than `duration`).
    pub limit: Time,
    /// Index into [`Workload::groups`].
    pub group: usize,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Workload {
    pub jobs: Vec<SimJob>,
    pub groups: Vec<String>,
    /// Jobs needing more cards than the pool has, left out.
    pub skipped: usize,
    /// Offered load of the pool before and after rescaling arrivals.
    pub trace_load: f64,
    pub load: f64,
}

/// GPU-seconds over the arrival span, per card: what the pool would be busy with if nothing
/// ever waited.
pub fn offered_load(jobs: &[TraceJob], gpus: u32) -> f64 {
    let first = jobs.iter().map(|j| j.submit).min().unwrap_or(0);
    let last = jobs.iter().map(|j| j.submit).max().unwrap_or(0);
    let work: f64 = jobs.iter().map(|j| j.gpus as f64 * j.duration as f64).sum();
    work / ((last - first).max(1) as f64 * f64::from(gpus.max(1)))
}

/// Merges traces, drops jobs larger than the pool, rescales arrivals to `load` (run times stay
/// as they are), and gives each job its time limit. Deterministic for a seed.
pub fn workload(
    mut jobs: Vec<TraceJob>,
    gpus: u32,
    load: Option<f64>,
    estimate: Estimate,
    seed: u64,
) -> Workload {
    let before = jobs.len();
    jobs.retain(|j| j.gpus <= gpus);
    let skipped = before - jobs.len();
    jobs.sort_by(|a, b| a.submit.cmp(&b.submit).then(a.group.cmp(&b.group)));
    let trace_load = offered_load(&jobs, gpus);
    let stretch = match load {
        Some(x) if x > 0.0 && trace_load > 0.0 => trace_load / x,
        _ => 1.0,
    };
    let first = jobs.first().map_or(0, |j| j.submit);
    let mut groups: Vec<String> = jobs.iter().map(|j| j.group.clone()).collect();
    groups.sort();
    groups.dedup();
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let jobs: Vec<SimJob> = jobs
        .iter()
        .map(|j| {
            let limit = match estimate {
                Estimate::Exact => j.duration,
                Estimate::Noisy => {
                    let factor = 1.0 + 2.0 * (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
                    let asked = (j.duration as f64 * factor).ceil() as Time;
                    (asked + 59) / 60 * 60
                }
            };
            SimJob {
                submit: first + ((j.submit - first) as f64 * stretch).round() as Time,
                gpus: j.gpus,
                duration: j.duration,
                limit: limit.max(j.duration),
                group: groups.binary_search(&j.group).unwrap_or(0),
            }
        })
        .collect();
    let load = trace_load / stretch;
    Workload {
        jobs,
        groups,
        skipped,
        trace_load,
        load,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TRACE: &str = "job_id,submit_s,gpus,duration_s,group\n\
                         0,0,1,100,a\n1,50,2,200,b\n2,100,16,10,a\n";

    #[test]
    fn a_trace_parses_and_bad_lines_are_named() {
        let jobs = parse(TRACE, "t.csv").unwrap();
        assert_eq!(jobs.len(), 3);
        assert_eq!(jobs[1].gpus, 2);
        assert_eq!(jobs[1].group, "b");
        let err = parse(
            "job_id,submit_s,gpus,duration_s,group\n0,x,1,1,a\n",
            "t.csv",
        );
        assert_eq!(
            err.unwrap_err().to_string(),
            "t.csv line 2: submit_s must be a whole number ≥ 0, not \"x\""
        );
        assert!(matches!(
            parse("a,b\n", "t"),
            Err(TraceError::Header { .. })
        ));
        assert!(matches!(
            parse("job_id,submit_s,gpus,duration_s,group\n", "t"),
            Err(TraceError::Empty(_))
        ));
    }

    #[test]
    fn rescaling_reaches_the_asked_load_and_oversized_jobs_are_left_out() {
        let jobs = parse(TRACE, "t").unwrap();
        let w = workload(jobs, 4, Some(0.5), Estimate::Exact, 1);
        assert_eq!(w.skipped, 1);
        // 500 GPU-seconds over 50 s on 4 cards is 2.5; half that needs arrivals 5× further apart.
        assert!((w.trace_load - 2.5).abs() < 1e-9);
        assert_eq!(w.jobs[1].submit, 250);
        assert!((w.load - 0.5).abs() < 1e-9);
        assert_eq!(w.groups, vec!["a".to_string(), "b".to_string()]);
    }

    #[test]
    fn noisy_limits_over_ask_and_depend_only_on_the_seed() {
        let jobs = parse(TRACE, "t").unwrap();
        let a = workload(jobs.clone(), 32, None, Estimate::Noisy, 7);
        let b = workload(jobs.clone(), 32, None, Estimate::Noisy, 7);
        let c = workload(jobs, 32, None, Estimate::Noisy, 8);
        assert_eq!(a, b);
        assert_ne!(a, c);
        for j in &a.jobs {
            assert!(j.limit >= j.duration && j.limit <= 3 * j.duration + 60);
            assert_eq!(j.limit % 60, 0);
        }
    }
}
