//! `lanes submit`, `queue`, `jobs`, `logs`, `cancel-job`: jobs the node's runner starts, under
//! the device wall, from the queue or inside a booking.

use crate::error::{CliError, Result};
use crate::output::{self, cell, Table, BOLD, CYAN, DIM, GREEN, RED, YELLOW};
use crate::{config, duration_arg, Common};
use chrono::Duration;
use clap::Args;
use lanes_client::{Client, LogEvent};
use lanes_types::container::ContainerSpec;
use lanes_types::job::{CreateJob, Job, JobState};
use lanes_types::notice::{NoticeRequest, NoticeSignal};
use lanes_types::query::{JobQuery, LogQuery};
use lanes_types::queue::{ForecastRequest, QueueState, SubmitJob};
use std::process::ExitCode;

#[derive(Debug, Args)]
pub struct SubmitArgs {
    /// Queue the job for this many cards (it starts when they free up).
    #[arg(
        long,
        short = 'g',
        conflicts_with = "booking",
        required_unless_present = "booking",
        value_parser = crate::count_arg
    )]
    pub gpus: Option<u32>,
    /// Its time limit in the queue (2h, 90m) [default: the queue's].
    #[arg(long, value_parser = duration_arg, conflicts_with = "booking")]
    pub time: Option<Duration>,
    /// Run it inside this booking of yours instead (on the booking's node, now).
    #[arg(long, short)]
    pub booking: Option<i64>,
    /// A name for the job lists.
    #[arg(long)]
    pub name: Option<String>,
    /// Only cards with at least this much memory (queue jobs; 80GiB).
    #[arg(long, conflicts_with = "booking")]
    pub min_memory: Option<String>,
    /// It may run on idle booked cards their holder lends; when they take them back it gets
    /// SIGTERM (checkpoint then), SIGKILL after the queue's grace, and waits again.
    #[arg(long, conflicts_with = "booking")]
    pub preemptible: bool,
    /// The project it is for (queue jobs; one the admins defined); default: your group's. A
    /// job in a booking counts under the booking's project.
    #[arg(long, conflicts_with = "booking")]
    pub project: Option<String>,
    /// Notice this long before its booking's end or time limit (15m, 1h) instead of the
    /// admin's lead, up to their maximum: LANES_NOTICE_FILE is written and the notice signal
    /// sent, then SIGTERM at the stop.
    #[arg(long, value_parser = duration_arg, value_name = "DURATION")]
    pub notice: Option<Duration>,
    /// The signal of that notice: SIGUSR1 (the admin's default unless they chose another),
    /// SIGUSR2, SIGHUP, SIGINT, SIGALRM, or none (the file alone). It goes only to the job's
    /// processes that catch it.
    #[arg(long, value_name = "SIGNAL")]
    pub notice_signal: Option<String>,
    /// Follow its output until it ends, and exit with its status.
    #[arg(long, short)]
    pub follow: bool,
    /// Queue nothing: say when it would likely start if queued now (p50 and p90, the queue
    /// replayed with past jobs' run times), and the earliest slot you could book instead.
    #[arg(long, conflicts_with_all = ["booking", "follow"])]
    pub dry_run: bool,
    #[command(flatten)]
    pub container: ContainerArgs,
    #[command(flatten)]
    pub common: Common,
    /// The command and its arguments (after `--`); it runs in this directory on the node.
    #[arg(
        required_unless_present = "dry_run",
        trailing_var_arg = true,
        allow_hyphen_values = true,
        num_args = 1..
    )]
    pub command: Vec<String>,
}

/// A job in a container image: `--image` and what goes with it, on `lanes submit` and
/// `lanes run`.
#[derive(Debug, Clone, Default, Args)]
pub struct ContainerArgs {
    /// Run the command in this container image (localhost/train:1, or the path of a .sif
    /// file), as you, on exactly the booked cards, inside the job's device wall.
    #[arg(long)]
    pub image: Option<String>,
    /// The container runtime: podman (default), apptainer (default for a .sif file), or
    /// docker (where the admin enables it).
    #[arg(long, requires = "image")]
    pub runtime: Option<String>,
    /// Mount a directory of yours (or one the admin shares): HOST:CONTAINER or
    /// HOST:CONTAINER:ro. Repeatable. The working directory is always mounted.
    #[arg(
        long = "volume",
        requires = "image",
        value_name = "HOST:CONTAINER[:ro]"
    )]
    pub volumes: Vec<String>,
    /// A runtime option from the short list: --shm-size=SIZE, --ipc=host,
    /// --entrypoint=PROGRAM, --read-only, --tmpfs=PATH, --network=none. Repeatable; write it
    /// with `=`: --container-option=--shm-size=8g.
    #[arg(
        long = "container-option",
        requires = "image",
        allow_hyphen_values = true,
        value_name = "OPTION"
    )]
    pub options: Vec<String>,
}

impl ContainerArgs {
    /// The request's container, checked here first (exit status 2 when it cannot be run).
    pub fn spec(&self) -> Result<Option<ContainerSpec>> {
        let Some(image) = &self.image else {
            return Ok(None);
        };
        let runtime = self
            .runtime
            .as_deref()
            .map(str::parse)
            .transpose()
            .map_err(|e: lanes_types::container::ContainerError| CliError::usage(e.to_string()))?;
        let spec = ContainerSpec {
            image: image.clone(),
            runtime,
            volumes: self.volumes.clone(),
            options: self.options.clone(),
        };
        spec.check().map_err(|e| CliError::usage(e.to_string()))?;
        Ok(Some(spec))
    }
}

#[derive(Debug, Args)]
pub struct JobsArgs {
    /// Everyone's jobs (admins see all; others only their own).
    #[arg(long)]
    pub all: bool,
    #[command(flatten)]
    pub common: Common,
}

#[derive(Debug, Args)]
pub struct LogsArgs {
    pub id: i64,
    /// Follow the output as it is written; exit with the job's status when it ends.
    #[arg(long, short)]
    pub follow: bool,
    /// stdout, stderr, or both (default).
    #[arg(long)]
    pub stream: Option<String>,
    #[command(flatten)]
    pub common: Common,
}

/// What `--notice` and `--notice-signal` ask for; `None` when neither is given.
fn notice_of(args: &SubmitArgs) -> Result<Option<NoticeRequest>> {
    let signal = args
        .notice_signal
        .as_deref()
        .map(str::parse::<NoticeSignal>)
        .transpose()
        .map_err(CliError::usage)?;
    let request = NoticeRequest {
        lead_s: args.notice.map(|d| d.num_seconds()),
        signal,
    };
    Ok((!request.is_empty()).then_some(request))
}

/// `--min-memory` in bytes.
fn min_memory_of(args: &SubmitArgs) -> Result<Option<u64>> {
    args.min_memory
        .as_deref()
        .map(lanes_types::units::parse_bytes)
        .transpose()
        .map_err(CliError::usage)
}

/// `lanes submit --dry-run`: when it would likely start, and the earliest slot to book.
async fn dry_run(args: &SubmitArgs) -> Result<ExitCode> {
    let min_memory_bytes = min_memory_of(args)?;
    let client = config::client()?;
    let f = client
        .forecast_start(&ForecastRequest {
            gpus: args.gpus.unwrap_or(1),
            time_limit_s: args.time.map(|t| t.num_seconds()),
            min_memory_bytes,
        })
        .await?;
    if args.common.json {
        output::json(&f);
        return Ok(ExitCode::SUCCESS);
    }
    let now = chrono::Utc::now();
    let line = |text: &str| output::print(&format!("{text}\n"));
    let at = |t: Option<chrono::DateTime<chrono::Utc>>| match t {
        Some(t) if t <= now + Duration::seconds(30) => "now".to_string(),
        Some(t) => format!(
            "{} (in {})",
            output::when(t),
            lanes_types::units::format_duration(t - now)
        ),
        None => format!("not within {} days", f.horizon_days),
    };
    let soon = |t: Option<chrono::DateTime<chrono::Utc>>| {
        t.is_some_and(|t| t <= now + Duration::seconds(30))
    };
    let basis = if f.history == 0 {
        " (no queue job has ended yet: each is taken to run to its time limit)".to_string()
    } else {
        format!(
            " ({} replays of the queue, with the run times of the last {} jobs)",
            f.samples, f.history
        )
    };
    if soon(f.p50) && soon(f.p90) {
        line(&format!(
            "If you queue this now ({} policy), it would start at once.",
            f.policy.as_str()
        ));
    } else {
        line(&format!(
            "If you queue this now ({} policy), it would likely start {}, and by {} nine times \
             in ten{basis}.",
            f.policy.as_str(),
            at(f.p50),
            at(f.p90),
        ));
    }
    line(&format!(
        "{DIM}If every job ran to its time limit: {}. Jobs queued later may still go \
         ahead.{DIM:#}",
        at(f.by_time_limits)
    ));
    match &f.earliest_booking {
        Some(slot) => line(&format!(
            "The earliest slot you could book instead: {} to {} on {} ({}).",
            output::when(slot.start),
            output::when(slot.end),
            slot.node,
            lanes_types::units::cards(slot.gpus.len() as u32)
        )),
        None => line("No slot you could book for it within the booking horizon."),
    }
    line(&format!("{DIM}Nothing was queued.{DIM:#}"));
    Ok(ExitCode::SUCCESS)
}

pub async fn submit(args: SubmitArgs) -> Result<ExitCode> {
    if args.dry_run {
        return dry_run(&args).await;
    }
    let container = args.container.spec()?;
    let notice = notice_of(&args)?;
    let client = config::client()?;
    let cwd = std::env::current_dir()
        .ok()
        .and_then(|d| d.to_str().map(str::to_string));
    let id = match args.booking {
        Some(booking_id) => {
            let job = client
                .submit_job(&CreateJob {
                    booking_id,
                    argv: args.command.clone(),
                    cwd,
                    env: None,
                    environment: None,
                    name: args.name.clone(),
                    container: container.clone(),
                    notice,
                    session: None,
                })
                .await?;
            report(
                &args.common,
                &job,
                &format!("Job {} submitted into booking #{booking_id}", job.id),
            );
            job.id
        }
        None => {
            let min_memory_bytes = min_memory_of(&args)?;
            let queued = client
                .enqueue(&SubmitJob {
                    project: args.project.clone(),
                    gpus: args.gpus.unwrap_or(1),
                    time_limit_s: args.time.map(|t| t.num_seconds()),
                    argv: args.command.clone(),
                    cwd,
                    env: None,
                    environment: None,
                    min_memory_bytes,
                    name: args.name.clone(),
                    preemptible: args.preemptible,
                    container,
                    notice,
                })
                .await?;
            let text = format!(
                "Job {} queued for {} ({}){}",
                queued.id,
                lanes_types::units::cards(queued.gpus),
                lanes_types::units::format_duration(Duration::seconds(queued.time_limit_s)),
                queued.estimated_start.map_or(String::new(), |t| format!(
                    "; expected to start {}",
                    output::when(t)
                ))
            );
            report(&args.common, &queued, &text);
            queued.id
        }
    };
    if args.follow {
        return follow(&client, id, &LogQuery::default()).await;
    }
    Ok(ExitCode::SUCCESS)
}

fn report<T: serde::Serialize>(common: &Common, value: &T, text: &str) {
    if common.json {
        output::json(value);
    } else {
        output::say(text);
    }
}

/// The exit status a job's end maps to: its own code, 128 + its signal, 1 for other ends.
pub fn exit_status(job: &Job) -> u8 {
    match (job.state, job.exit_code, job.signal) {
        (JobState::Exited, Some(code), _) => code.clamp(0, 255) as u8,
        (_, _, Some(signal)) => (128 + signal).clamp(0, 255) as u8,
        _ => 1,
    }
}

/// Prints a job's output as it is written, then exits with its status.
pub(crate) async fn follow(client: &Client, id: i64, query: &LogQuery) -> Result<ExitCode> {
    use std::io::Write;
    let mut tail = client.follow_log(id, query).await?;
    let mut out = std::io::stdout();
    loop {
        match tail.next().await {
            Some(Ok(LogEvent::Output(text))) => {
                let _ = out.write_all(text.as_bytes());
                let _ = out.flush();
            }
            Some(Ok(LogEvent::Closed { .. })) | None => break,
            Some(Err(e)) => return Err(e.into()),
        }
    }
    // The tail closes when the job is over; its record may trail by a moment.
    for _ in 0..50 {
        let job = client.job(id).await?;
        if let Some(line) = ending(&job) {
            output::say(&line);
            return Ok(ExitCode::from(exit_status(&job)));
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    Err(CliError::refused(format!(
        "the log of job {id} closed but the job is not over"
    )))
}

/// The last line about a job that is over: how it ended, and why when the server said
/// ("job 4 failed: python4: not found on the PATH of …"); `None` while it is not over.
fn ending(job: &Job) -> Option<String> {
    if !job.state.is_over() {
        return None;
    }
    let status = job
        .exit_code
        .map_or(String::new(), |c| format!(" with status {c}"));
    let why = if job.message.is_empty() {
        String::new()
    } else {
        format!(": {}", job.message)
    };
    let style = if job.state == JobState::Exited && job.exit_code == Some(0) {
        DIM
    } else {
        RED
    };
    Some(format!(
        "{style}lanes: job {} {}{status}{why}{style:#}",
        job.id,
        job.standing().as_str()
    ))
}

/// Ended jobs `lanes queue` shows under the waiting and running ones (`lanes jobs` has all).
const ENDED_SHOWN: usize = 5;

pub async fn queue(common: Common) -> Result<()> {
    let client = config::client()?;
    let view = client.queue().await?;
    if common.json {
        output::json(&view);
        return Ok(());
    }
    let (live, ended): (Vec<_>, Vec<_>) = view
        .jobs
        .iter()
        .partition(|j| matches!(j.state, QueueState::Pending | QueueState::Running));
    if live.is_empty() {
        output::say(
            "nothing waits or runs in the queue (`lanes submit --gpus N -- CMD` adds a job)",
        );
    } else {
        output::print(&queue_table(&live).render());
    }
    if !ended.is_empty() {
        let mut ended = ended;
        ended.sort_by_key(|j| std::cmp::Reverse(j.ended_at.unwrap_or(j.submitted_at)));
        let more = ended.len().saturating_sub(ENDED_SHOWN);
        ended.truncate(ENDED_SHOWN);
        output::print(&format!("\n{BOLD}Ended lately{BOLD:#}\n"));
        output::print(&queue_table(&ended).render());
        if more > 0 {
            output::say(&format!("{DIM}{more} more ended: `lanes jobs`{DIM:#}"));
        }
    }
    Ok(())
}

/// Queue jobs in a table that fits 100 columns: long reasons and commands are cut with "…"
/// (`lanes queue --json` and `lanes jobs` have them whole).
fn queue_table(jobs: &[&lanes_types::queue::QueuedJob]) -> Table {
    let mut table = Table::new(&[
        "ID",
        "USER",
        "STATE",
        "GPUS",
        "LIMIT",
        "WHY / WHEN",
        "COMMAND",
    ]);
    for job in jobs {
        let style = match job.state {
            QueueState::Running => GREEN,
            QueueState::Pending => CYAN,
            QueueState::Failed | QueueState::TimedOut => RED,
            _ => DIM,
        };
        let why = match (job.state, job.estimated_start, &job.reason) {
            (QueueState::Pending, Some(t), _) => format!(
                "#{} · expected {}",
                job.position.unwrap_or(0),
                output::when(t)
            ),
            (QueueState::Pending, None, Some(reason)) => reason.clone(),
            (QueueState::Running, ..) => job
                .started_at
                .map_or(String::new(), |t| format!("since {}", output::when(t))),
            _ if job.message.is_empty() => job
                .ended_at
                .map_or(String::new(), |t| format!("at {}", output::when(t))),
            _ => job.message.clone(),
        };
        table.row(vec![
            cell(job.id.to_string()).right(),
            cell(&job.username).at_most(10),
            cell(job.state.as_str()).styled(style),
            cell(job.gpus.to_string()).right(),
            cell(lanes_types::units::format_duration(Duration::seconds(
                job.time_limit_s,
            ))),
            cell(why).at_most(34),
            cell(if job.name.is_empty() {
                job.argv.join(" ")
            } else {
                job.name.clone()
            })
            .at_most(22),
        ]);
    }
    table
}

pub async fn list(args: JobsArgs) -> Result<()> {
    let client = config::client()?;
    let me = client.me().await?;
    let query = JobQuery {
        user: (!args.all).then(|| me.username.clone()),
        ..Default::default()
    };
    if args.all && !me.is_admin() {
        // The server shows a member only their own; say so rather than let "all" mislead.
        output::say(&format!(
            "{DIM}lanes: only admins see everyone's jobs; these are {}'s{DIM:#}",
            me.username
        ));
    }
    let mut jobs = client.jobs(&query).await?;
    jobs.sort_by_key(|j| std::cmp::Reverse(j.id));
    if args.common.json {
        output::json(&jobs);
        return Ok(());
    }
    let mut table = Table::new(&[
        "ID", "USER", "STATE", "WHERE", "STARTED", "ENDED", "EXIT", "COMMAND",
    ]);
    for job in &jobs {
        let style = match job.state {
            JobState::Running => GREEN,
            JobState::Pending | JobState::Queued => CYAN,
            JobState::Exited if job.exit_code == Some(0) => DIM,
            JobState::Cancelled => YELLOW,
            _ => RED,
        };
        table.row(vec![
            cell(job.id.to_string()).right(),
            cell(&job.username),
            cell(job.standing().as_str()).styled(style),
            cell(match (job.queue, job.booking_id) {
                (Some(q), _) => format!("queue · {}", lanes_types::units::cards(q.gpus)),
                (None, Some(b)) => format!("booking #{b}"),
                (None, None) => String::new(),
            }),
            cell(job.started_at.map_or("-".into(), output::when)),
            cell(job.ended_at.map_or("-".into(), output::when)),
            cell(match (job.exit_code, job.signal) {
                (Some(c), _) => c.to_string(),
                (None, Some(s)) => format!("signal {s}"),
                _ => "-".into(),
            })
            .right(),
            // A notebook open now: where to open it.
            cell(match job.session_path() {
                Some(path) if job.state == JobState::Running => format!(
                    "{} {}{path}",
                    job.title(),
                    client.base().trim_end_matches('/')
                ),
                _ => job.title(),
            }),
        ]);
    }
    if table.is_empty() {
        output::say("no jobs");
    } else {
        output::print(&table.render());
    }
    Ok(())
}

pub async fn logs(args: LogsArgs) -> Result<ExitCode> {
    let client = config::client()?;
    let query = LogQuery {
        stream: args.stream.clone(),
        tail: None,
    };
    if args.follow {
        return follow(&client, args.id, &query).await;
    }
    let part = client.job_log(args.id, &query, None).await?;
    if args.common.json {
        output::json(&serde_json::json!({ "job": args.id, "log": part.text }));
    } else {
        print!("{}", part.text);
        // Why it ended, where the log may not say it (a job that never started has none).
        let job = client.job(args.id).await?;
        if let Some(line) = ending(&job) {
            output::say(&line);
        }
    }
    Ok(ExitCode::SUCCESS)
}

pub async fn cancel(args: crate::bookings::IdArgs) -> Result<()> {
    let client = config::client()?;
    let job = client.cancel_job(args.id).await?;
    // A running job is stopped by its node's runner, with its grace: the answer comes first.
    let said = if job.state.is_over() {
        format!("Job {} {}", job.id, job.standing().as_str())
    } else {
        format!(
            "Job {} is being stopped: SIGTERM now, SIGKILL after its grace period \
             (`lanes jobs` shows when it has ended)",
            job.id
        )
    };
    report(&args.common, &job, &said);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_job_end_maps_to_the_exit_status_a_shell_would_give() {
        let job: Job = serde_json::from_value(serde_json::json!({
            "id": 1, "booking_id": null, "user_id": 1, "username": "a", "name": "", "argv": ["x"],
            "cwd": null, "state": "exited", "pid": null, "created_at": "2026-12-01T00:00:00Z",
            "started_at": null, "ended_at": null, "exit_code": 3, "signal": null, "message": ""
        }))
        .unwrap();
        assert_eq!(exit_status(&job), 3);
        let killed = Job {
            state: JobState::Killed,
            exit_code: None,
            signal: Some(15),
            ..job.clone()
        };
        assert_eq!(exit_status(&killed), 143);
        let lost = Job {
            state: JobState::Lost,
            exit_code: None,
            ..job
        };
        assert_eq!(exit_status(&lost), 1);
    }
}
