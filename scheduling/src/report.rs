//! `lanes simulate`: replays every asked policy at every asked load over the traces the caller
//! read, and renders the table, the JSON and the plot.

use super::fairshare::ShareTable;
use super::plot::{self, Line};
use super::scheduler::{Policy, Time};
use super::simulate::{self, Metrics, Model, Outcome, Settings};
use super::trace::{self, Estimate, TraceError};

/// What to replay.
#[derive(Clone, Debug)]
pub struct Request {
    pub traces: Vec<TraceText>,
    pub gpus: u32,
    pub models: Vec<Model>,
    /// Offered loads to rescale to; `None` replays the trace's own timing.
    pub loads: Vec<Option<f64>>,
    pub estimate: Estimate,
    pub seed: u64,
    pub settings: Settings,
}

/// One trace file's text, with the name its errors are reported under.
#[derive(Clone, Debug)]
pub struct TraceText {
    pub name: String,
    pub text: String,
}

#[derive(Debug, thiserror::Error)]
pub enum SimulateError {
    #[error(transparent)]
    Trace(#[from] TraceError),
    #[error("{0}")]
    Invalid(String),
}

/// Every replay's figures, with what they came from.
#[derive(Debug, serde::Serialize)]
pub struct Report {
    pub traces: Vec<String>,
    pub gpus: u32,
    pub jobs: usize,
    pub skipped: usize,
    pub trace_load: f64,
    pub estimate: String,
    pub seed: u64,
    pub runs: Vec<Metrics>,
    #[serde(skip)]
    outcomes: Vec<Outcome>,
}

pub fn run(request: &Request) -> Result<Report, SimulateError> {
    if request.gpus == 0 {
        return Err(SimulateError::Invalid("--gpus must be at least 1".into()));
    }
    if let Some(bad) = request
        .loads
        .iter()
        .flatten()
        .find(|l| !(**l > 0.0 && l.is_finite()))
    {
        return Err(SimulateError::Invalid(format!(
            "--load must be above 0, not {bad}"
        )));
    }
    let mut jobs = Vec::new();
    for trace in &request.traces {
        jobs.extend(trace::parse(&trace.text, &trace.name)?);
    }
    let loads = if request.loads.is_empty() {
        vec![None]
    } else {
        request.loads.clone()
    };
    let workloads: Vec<_> = loads
        .iter()
        .map(|&load| {
            trace::workload(
                jobs.clone(),
                request.gpus,
                load,
                request.estimate,
                request.seed,
            )
        })
        .collect();
    if workloads[0].jobs.is_empty() {
        return Err(SimulateError::Invalid(format!(
            "no job in the trace fits on {} cards",
            request.gpus
        )));
    }
    let cases: Vec<(usize, Model)> = (0..workloads.len())
        .flat_map(|w| request.models.iter().map(move |&m| (w, m)))
        .collect();
    // Replays are independent: run them side by side.
    let outcomes: Vec<Outcome> = std::thread::scope(|scope| {
        let handles: Vec<_> = cases
            .iter()
            .map(|&(w, model)| {
                let workload = &workloads[w];
                let settings = &request.settings;
                scope.spawn(move || simulate::run(workload, request.gpus, model, settings))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("a replay panicked"))
            .collect()
    });
    Ok(Report {
        traces: request.traces.iter().map(|t| t.name.clone()).collect(),
        gpus: request.gpus,
        jobs: workloads[0].jobs.len(),
        skipped: workloads[0].skipped,
        trace_load: workloads[0].trace_load,
        estimate: format!("{:?}", request.estimate).to_lowercase(),
        seed: request.seed,
        runs: outcomes.iter().map(|o| o.metrics.clone()).collect(),
        outcomes,
    })
}

impl Report {
    /// The table, as Markdown.
    pub fn table(&self) -> String {
        let mut out = String::from(
            "| load | policy | utilization | mean delay | median delay | p95 delay | mean completion | makespan | Jain | held idle | preemptions |\n\
             |---|---|---|---|---|---|---|---|---|---|---|\n",
        );
        for m in &self.runs {
            let held = if m.policy == "static" {
                format!("{:.1}%", m.held_idle_fraction * 100.0)
            } else {
                "–".into()
            };
            let preempted = if m.policy == "las" {
                m.preemptions.to_string()
            } else {
                "–".into()
            };
            out.push_str(&format!(
                "| {:.2} | {} | {:.1}% | {} | {} | {} | {} | {} | {:.3} | {} | {} |\n",
                m.load,
                m.policy,
                m.utilization * 100.0,
                span(m.mean_delay_s),
                span(m.median_delay_s),
                span(m.p95_delay_s),
                span(m.mean_completion_s),
                span(m.makespan_s as f64),
                m.jain,
                held,
                preempted
            ));
        }
        out
    }

    /// Utilization over time, one line per replay.
    pub fn svg(&self) -> String {
        let lines: Vec<Line> = self
            .outcomes
            .iter()
            .map(|o| Line {
                label: format!("{} @ {:.2}", o.metrics.policy, o.metrics.load),
                busy: &o.busy,
            })
            .collect();
        let names: Vec<&str> = self
            .traces
            .iter()
            .map(|t| t.rsplit('/').next().unwrap_or(t))
            .collect();
        plot::svg(
            &format!("Utilization of {} GPUs: {}", self.gpus, names.join(", ")),
            self.gpus,
            &lines,
        )
    }
}

/// Seconds in the unit that reads best.
pub fn span(seconds: f64) -> String {
    if seconds < 120.0 {
        format!("{seconds:.0} s")
    } else if seconds < 7_200.0 {
        format!("{:.1} min", seconds / 60.0)
    } else if seconds < 3.0 * 86_400.0 {
        format!("{:.1} h", seconds / 3_600.0)
    } else {
        format!("{:.1} d", seconds / 86_400.0)
    }
}

/// The models named on the command line: a policy, `static`, or `all`.
pub fn models(names: &[String], block: Time) -> Result<Vec<Model>, SimulateError> {
    let mut models = Vec::new();
    for name in names {
        match name.as_str() {
            "all" => {
                models.extend(Policy::ALL.map(Model::Queue));
                models.push(Model::Static { block });
            }
            "static" => models.push(Model::Static { block }),
            other => models.push(Model::Queue(other.parse().map_err(SimulateError::Invalid)?)),
        }
    }
    if models.is_empty() {
        return Err(SimulateError::Invalid("name at least one --policy".into()));
    }
    Ok(models)
}

/// `group=shares` pairs.
pub fn shares(pairs: &[String]) -> Result<ShareTable, SimulateError> {
    let mut table = ShareTable::default();
    for pair in pairs {
        let parsed = pair
            .split_once('=')
            .and_then(|(g, s)| Some((g.to_string(), s.parse::<f64>().ok().filter(|s| *s > 0.0)?)));
        let Some((group, share)) = parsed else {
            return Err(SimulateError::Invalid(format!(
                "--share takes GROUP=SHARES with SHARES above 0, not {pair:?}"
            )));
        };
        table.groups.insert(group, share);
    }
    Ok(table)
}

/// How often start-time forecasts came true (see [`simulate::accuracy`]): for each load and
/// each queue policy of `request`, jobs submitted `after` seconds past the first are forecast
/// (every `every`-th), and the forecast compared with the replay. A Markdown table.
pub fn forecast_table(
    request: &Request,
    after: Time,
    every: usize,
    samples: u32,
) -> Result<String, SimulateError> {
    let policies: Vec<Policy> = request
        .models
        .iter()
        .filter_map(|m| match m {
            Model::Queue(p) if *p != Policy::Las => Some(*p),
            _ => None,
        })
        .collect();
    if policies.is_empty() {
        return Err(SimulateError::Invalid(
            "--forecast measures the queue policies fifo, backfill and fairshare (least \
             attained service preempts, which the forecast does not model)"
                .into(),
        ));
    }
    if request.gpus == 0 || every == 0 || samples == 0 {
        return Err(SimulateError::Invalid(
            "--gpus, --forecast-every and --forecast-samples must be at least 1".into(),
        ));
    }
    let mut jobs = Vec::new();
    for trace in &request.traces {
        jobs.extend(trace::parse(&trace.text, &trace.name)?);
    }
    let mut out = String::from(
        "| load | policy | jobs forecast | started by p50 | started by p90 | median error of p50 | their mean wait |\n|---|---|---|---|---|---|---|\n",
    );
    let loads = if request.loads.is_empty() {
        &[None][..]
    } else {
        &request.loads[..]
    };
    for &load in loads {
        let w = trace::workload(
            jobs.clone(),
            request.gpus,
            load,
            request.estimate,
            request.seed,
        );
        let from = w.jobs.first().map_or(0, |j| j.submit) + after;
        for &policy in &policies {
            let a = simulate::accuracy(
                &w,
                request.gpus,
                policy,
                &request.settings,
                from,
                every,
                samples,
            );
            out.push_str(&format!(
                "| {:.2} | {} | {} | {:.0} % | {:.0} % | {} | {} |\n",
                w.load,
                a.policy,
                a.jobs,
                a.by_p50 * 100.0,
                a.by_p90 * 100.0,
                span(a.median_error_s),
                span(a.mean_wait_s),
            ));
        }
    }
    Ok(out)
}

/// The mixed model (see [`crate::lending`]) over `traces` on `gpus` cards of which
/// `model.booked_gpus` are booked, at each load (of the queue's own cards), without and with
/// lending: a Markdown table.
pub fn lending_table(
    traces: &[TraceText],
    gpus: u32,
    loads: &[Option<f64>],
    estimate: Estimate,
    model: &crate::lending::MixedModel,
) -> Result<String, SimulateError> {
    if model.booked_gpus == 0 || model.booked_gpus >= gpus {
        return Err(SimulateError::Invalid(format!(
            "--booked must be from 1 to {} (fewer than --gpus)",
            gpus.saturating_sub(1)
        )));
    }
    if !(0.01..=0.99).contains(&model.idle_fraction)
        || !(0.0..=1.0).contains(&model.preemptible_fraction)
    {
        return Err(SimulateError::Invalid(
            "--idle-fraction must be from 0.01 to 0.99, --preemptible from 0 to 1".into(),
        ));
    }
    if model.booking_width == 0
        || model.booking_width > model.booked_gpus
        || model.node_gpus < model.booking_width
    {
        return Err(SimulateError::Invalid(format!(
            "--booking-width must be from 1 to --booked ({}), and --node-gpus at least it",
            model.booked_gpus
        )));
    }
    let mut jobs = Vec::new();
    for trace in traces {
        jobs.extend(trace::parse(&trace.text, &trace.name)?);
    }
    let queue_gpus = gpus - model.booked_gpus;
    let mut out = String::from(
        "| load | lending | utilization | booked idle | lent | queue mean wait | queue p95 wait | queue mean completion | holder mean delay | holder max delay | reclaims | wide loans |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n",
    );
    let loads = if loads.is_empty() { &[None][..] } else { loads };
    for &load in loads {
        let w = trace::workload(jobs.clone(), queue_gpus, load, estimate, model.seed);
        for lending in crate::lending::Lending::ALL {
            let m = crate::lending::run(&w, queue_gpus, model, lending);
            out.push_str(&format!(
                "| {:.2} | {} | {:.1} % | {:.1} % | {:.1} % | {} | {} | {} | {} | {} | {} | {} |\n",
                w.load,
                lending.label(),
                m.utilization * 100.0,
                m.booked_idle_fraction * 100.0,
                m.lent_fraction * 100.0,
                span(m.queue_mean_wait_s),
                span(m.queue_p95_wait_s),
                span(m.queue_mean_completion_s),
                span(m.holder_mean_delay_s),
                span(m.holder_max_delay_s as f64),
                m.reclaims,
                m.wide_loans,
            ));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans_read_in_the_nearest_unit() {
        assert_eq!(span(59.0), "59 s");
        assert_eq!(span(600.0), "10.0 min");
        assert_eq!(span(5_400.0 * 4.0), "6.0 h");
        assert_eq!(span(86_400.0 * 10.0), "10.0 d");
    }

    #[test]
    fn model_and_share_names_are_checked() {
        assert_eq!(models(&["all".into()], 3_600).unwrap().len(), 5);
        assert!(matches!(
            models(&["lifo".into()], 1),
            Err(SimulateError::Invalid(_))
        ));
        assert_eq!(shares(&["a=3".into()]).unwrap().groups["a"], 3.0);
        assert!(shares(&["a=-1".into()]).is_err());
    }
}
