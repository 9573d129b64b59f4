//! `lanes jupyter`: your own Jupyter on your booked cards, through the portal. The node's
//! Lanes starts it as you, from your login environment, inside the booking (its cards only,
//! stopped with it); the portal serves it at `/sessions/ID/` to you alone. This command asks
//! for it, waits until it answers and prints where to open it.

use crate::error::{CliError, Result};
use crate::output;
use crate::{config, duration_arg, Common};
use chrono::{Duration, Utc};
use clap::Args;
use lanes_client::Client;
use lanes_types::booking::{Booking, BookingState};
use lanes_types::job::{CreateJob, Job, SessionKind};
use lanes_types::query::BookingQuery;
use std::process::ExitCode;

/// How long Jupyter may take to answer once started (a login profile and Jupyter's own start).
const READY_WAIT: std::time::Duration = std::time::Duration::from_secs(180);

#[derive(Debug, Args)]
pub struct JupyterArgs {
    /// Open it in this booking of yours (default: your one active booking).
    #[arg(long, short, conflicts_with = "gpus")]
    pub booking: Option<i64>,
    /// Book this many cards from now for --for and open it there.
    #[arg(long, short = 'g', value_parser = crate::count_arg)]
    pub gpus: Option<u32>,
    /// How long a booking made by --gpus lasts.
    #[arg(long = "for", default_value = "4h", value_parser = duration_arg)]
    pub length: Duration,
    /// With --gpus: book cards of this node.
    #[arg(long)]
    pub node: Option<String>,
    #[command(flatten)]
    pub common: Common,
}

pub async fn jupyter(args: JupyterArgs) -> Result<ExitCode> {
    let client = config::client()?;
    let me = client.me().await?;
    let booking = match args.gpus {
        Some(count) => {
            let booking = crate::run::book_here(
                &client,
                args.node.as_deref(),
                count,
                args.length,
                "lanes jupyter".into(),
            )
            .await?;
            let inventory = client.gpus().await.unwrap_or_default();
            say(
                &args,
                &format!("booked {}", crate::bookings::describe(&booking, &inventory)),
            );
            booking
        }
        None => chosen(&client, &me, args.booking).await?,
    };
    let job = client
        .submit_job(&CreateJob::session(booking.id, SessionKind::Jupyter))
        .await?;
    say(
        &args,
        &format!(
            "starting your Jupyter in booking {} (session {})",
            booking.id, job.id
        ),
    );
    let job = ready(&client, job.id).await?;
    let url = format!(
        "{}{}",
        client.base().trim_end_matches('/'),
        job.session_path().unwrap_or_default()
    );
    if args.common.json {
        output::json(&serde_json::json!({ "session": job, "url": url }));
    } else {
        println!("{url}");
        say(
            &args,
            &format!(
                "open it in a browser logged in to the portal; it ends with the booking ({}), \
                 or when idle (`lanes cancel-job {}` ends it now)",
                output::when(booking.end),
                job.id
            ),
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// Waits until session `id` answers through the portal; if it ends first, says why from its
/// log (a member without Jupyter reads what to install).
async fn ready(client: &Client, id: i64) -> Result<Job> {
    let deadline = tokio::time::Instant::now() + READY_WAIT;
    let mut pause = std::time::Duration::from_millis(200);
    loop {
        let job = client.job(id).await?;
        if job.state.is_over() {
            let log = client
                .job_log(
                    id,
                    &lanes_types::query::LogQuery {
                        stream: Some("stderr".into()),
                        tail: Some(40),
                    },
                    None,
                )
                .await
                .map(|l| l.text)
                .unwrap_or_default();
            let said: Vec<&str> = log
                .lines()
                // Not the header Lanes wrote: what the session itself said last.
                .filter(|l| !l.starts_with("lanes: "))
                .rev()
                .take(8)
                .collect::<Vec<_>>()
                .into_iter()
                .rev()
                .collect();
            return Err(CliError::refused(format!(
                "the session ended before it answered ({}{}){}",
                job.state.as_str(),
                job.exit_code
                    .map(|c| format!(", exit status {c}"))
                    .unwrap_or_default(),
                if said.is_empty() {
                    format!(": {}", job.message)
                } else {
                    format!(":\n{}", said.join("\n"))
                }
            )));
        }
        if job.state == lanes_types::job::JobState::Running && client.session_ready(id).await? {
            return Ok(job);
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(CliError::refused(format!(
                "session {id} did not answer within {} s; its log: lanes logs {id}",
                READY_WAIT.as_secs()
            )));
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(std::time::Duration::from_secs(2));
    }
}

/// The booking named, or the caller's one active booking.
async fn chosen(
    client: &Client,
    me: &lanes_types::account::User,
    id: Option<i64>,
) -> Result<Booking> {
    if let Some(id) = id {
        let booking = client.booking(id).await?;
        if booking.user_id != me.id {
            return Err(CliError::refused(format!(
                "booking {id} is {}'s, not yours",
                booking.username
            )));
        }
        return match booking.state {
            BookingState::Active => Ok(booking),
            BookingState::Upcoming => Err(CliError::refused(format!(
                "booking {id} starts {}; open the notebook then",
                output::when(booking.start)
            ))),
            other => Err(CliError::refused(format!(
                "booking {id} is {} and holds no cards",
                other.as_str()
            ))),
        };
    }
    let now = Utc::now();
    let active: Vec<Booking> = client
        .bookings(&BookingQuery {
            from: Some(now),
            to: Some(now + Duration::seconds(1)),
            user: Some(me.username.clone()),
            ..Default::default()
        })
        .await?
        .into_iter()
        .filter(|b| b.state == BookingState::Active && b.loan_of.is_none() && b.queue_job.is_none())
        .collect();
    match active.len() {
        0 => Err(CliError::refused(
            "you hold no active booking: `lanes jupyter --gpus 1 --for 4h` books a card and opens \
             the notebook on it",
        )),
        1 => Ok(active.into_iter().next().expect("one")),
        _ => Err(CliError::usage(format!(
            "you hold several active bookings ({}): choose one with --booking ID",
            active
                .iter()
                .map(|b| format!("#{}", b.id))
                .collect::<Vec<_>>()
                .join(", ")
        ))),
    }
}

fn say(args: &JupyterArgs, text: &str) {
    if !args.common.json {
        output::say(&format!("lanes: {text}"));
    }
}
