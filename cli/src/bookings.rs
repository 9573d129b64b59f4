//! `lanes book`, `slots`, `bookings`, `extend`, `release`, `cancel`.

use crate::error::{CliError, Result};
use crate::output::{self, cell, Table, CYAN, DIM, GREEN, YELLOW};
use crate::{config, confirm, duration_arg, time, Common};
use chrono::{DateTime, Duration, Utc};
use clap::Args;
use lanes_types::booking::{Booking, BookingState, CreateBooking, ExtendBooking, FreeSlot};
use lanes_types::query::{BookingQuery, SlotQuery};
use lanes_types::GpuState;

#[derive(Debug, Args)]
pub struct BookArgs {
    /// How many cards.
    #[arg(long, short = 'g', default_value_t = 1, value_parser = crate::count_arg)]
    pub gpus: u32,
    /// Only cards of this node.
    #[arg(long, short)]
    pub node: Option<String>,
    /// How long (4h, 90m, 1h30m).
    #[arg(long = "for", default_value = "1h", value_parser = duration_arg)]
    pub length: Duration,
    /// When it starts: now (default), 14:00, 'tomorrow 9:00', '2026-12-02 14:00', +2h.
    #[arg(long, conflicts_with = "earliest")]
    pub at: Option<String>,
    /// The earliest slot that fits, shown before booking.
    #[arg(long)]
    pub earliest: bool,
    /// What it is for, shown on the calendar.
    #[arg(long, default_value = "")]
    pub note: String,
    /// Book without asking (with --earliest).
    #[arg(long, short)]
    pub yes: bool,
    /// Only cards with at least this much memory (80GiB).
    #[arg(long)]
    pub min_memory: Option<String>,
    /// Lend the cards to preemptible queue jobs while they sit idle (taken back the moment
    /// you start work on them).
    #[arg(long, conflicts_with = "no_lend")]
    pub lend: bool,
    /// Do not lend them, whatever the portal's default.
    #[arg(long)]
    pub no_lend: bool,
    /// The project it is for (one the admins defined); default: your group's.
    #[arg(long)]
    pub project: Option<String>,
    #[command(flatten)]
    pub common: Common,
}

#[derive(Debug, Args)]
pub struct SlotsArgs {
    #[arg(long, short = 'g', default_value_t = 1, value_parser = crate::count_arg)]
    pub gpus: u32,
    #[arg(long = "for", default_value = "1h", value_parser = duration_arg)]
    pub length: Duration,
    /// The earliest start [default: now].
    #[arg(long)]
    pub from: Option<String>,
    /// The latest end [default: a week after --from].
    #[arg(long)]
    pub to: Option<String>,
    #[arg(long, short)]
    pub node: Option<String>,
    #[arg(long)]
    pub min_memory: Option<String>,
    /// At most this many windows.
    #[arg(long, default_value_t = 5)]
    pub limit: u32,
    #[command(flatten)]
    pub common: Common,
}

#[derive(Debug, Args)]
pub struct BookingsArgs {
    /// Everyone's, not only yours.
    #[arg(long)]
    pub all: bool,
    /// Ended ones of the last week too.
    #[arg(long)]
    pub past: bool,
    #[command(flatten)]
    pub common: Common,
}

#[derive(Debug, Args)]
pub struct ExtendArgs {
    /// The booking.
    pub id: i64,
    /// How much longer (1h, 30m).
    #[arg(value_parser = duration_arg)]
    pub by: Duration,
    #[command(flatten)]
    pub common: Common,
}

#[derive(Debug, Args)]
pub struct IdArgs {
    pub id: i64,
    #[command(flatten)]
    pub common: Common,
}

fn when_arg(text: &str, now: DateTime<Utc>) -> Result<DateTime<Utc>> {
    time::parse_when(text, now).map_err(CliError::usage)
}

/// One line about a booking: "#12 · GPU 0,1 · node-a · 14:00–18:00 (4h) · active".
pub fn describe(booking: &Booking, inventory: &[GpuState]) -> String {
    format!(
        "#{} · {} · {}–{} ({}) · {}",
        booking.id,
        output::cards_name(&booking.gpus, inventory),
        output::when(booking.start),
        output::when(booking.end),
        lanes_types::units::format_duration(booking.end - booking.start),
        booking.state.as_str()
    )
}

fn describe_slot(slot: &FreeSlot, inventory: &[GpuState]) -> String {
    let wait = slot.start - Utc::now();
    let starts = if wait <= Duration::minutes(1) {
        "now".to_string()
    } else {
        format!("in {}", lanes_types::units::format_duration(wait))
    };
    format!(
        "{} · {}–{} ({starts}; {} of the node's cards free then)",
        output::cards_name(&slot.gpus, inventory),
        output::when(slot.start),
        output::when(slot.end),
        slot.free_cards
    )
}

fn slot_query(
    gpus: u32,
    length: Duration,
    from: Option<DateTime<Utc>>,
    to: Option<DateTime<Utc>>,
    node: Option<String>,
    min_memory: Option<String>,
    limit: u32,
) -> SlotQuery {
    SlotQuery {
        gpus,
        duration: format!("{}s", length.num_seconds()),
        from,
        to,
        node,
        min_memory,
        limit: Some(limit),
    }
}

pub async fn book(args: BookArgs) -> Result<()> {
    let client = config::client()?;
    let now = Utc::now();
    let start = args.at.as_deref().map(|t| when_arg(t, now)).transpose()?;
    let inventory = client.gpus().await?;
    let request = if args.earliest {
        let query = slot_query(
            args.gpus,
            args.length,
            None,
            None,
            args.node.clone(),
            args.min_memory.clone(),
            1,
        );
        let Some(slot) = client.slots(&query).await?.into_iter().next() else {
            return Err(CliError::refused(format!(
                "no {}{} are free for {} within the next week (see `lanes status`)",
                lanes_types::units::cards(args.gpus),
                args.node
                    .as_ref()
                    .map_or(String::new(), |n| format!(" of {n}")),
                lanes_types::units::format_duration(args.length)
            )));
        };
        output::say(&format!("Earliest: {}", describe_slot(&slot, &inventory)));
        if !args.yes && !confirm("Book it?", true)? {
            // Declining is an answer, not a failure.
            output::say("Nothing booked.");
            return Ok(());
        }
        CreateBooking {
            project: args.project.clone(),
            lend: lend_choice(&args),
            ..named(&slot, args.note.clone())
        }
    } else if args.node.is_some() || args.min_memory.is_some() {
        // Cards of one node (or big enough) for exactly this slot: the search names them.
        let start = start.unwrap_or(now);
        let end = start + args.length;
        let query = slot_query(
            args.gpus,
            args.length,
            Some(start),
            None,
            args.node.clone(),
            args.min_memory.clone(),
            1,
        );
        let slot = client.slots(&query).await?.into_iter().next();
        // Starts are on the minute grid after `start`: a window that starts within a minute of
        // it is this slot.
        match slot.filter(|s| s.start <= start + Duration::minutes(1)) {
            Some(slot) => CreateBooking {
                project: args.project.clone(),
                start,
                end,
                lend: lend_choice(&args),
                ..named(&slot, args.note.clone())
            },
            None => {
                return Err(CliError::refused(format!(
                    "{}{} are not free from {} to {}; `lanes book --earliest` finds when they are",
                    lanes_types::units::cards(args.gpus),
                    args.node
                        .as_ref()
                        .map_or(String::new(), |n| format!(" of {n}")),
                    output::when(start),
                    output::when(end)
                )))
            }
        }
    } else {
        let start = start.unwrap_or(now);
        CreateBooking {
            project: args.project.clone(),
            gpus: None,
            count: Some(args.gpus),
            start,
            end: start + args.length,
            note: args.note.clone(),
            user: None,
            lend: lend_choice(&args),
        }
    };
    let booking = client.book(&request).await?;
    if args.common.json {
        output::json(&booking);
    } else {
        output::say(&format!("Booked {}", describe(&booking, &inventory)));
        for line in others_on(&booking, &inventory) {
            output::say(&format!("{YELLOW}{line}{YELLOW:#}"));
        }
    }
    Ok(())
}

/// What already runs on a booking's cards that is not its owner's (someone's unbooked work,
/// which the watchdog deals with by the lab's policy once the booking starts): one line per
/// card. Simulated scenery is nobody's and left out.
fn others_on(booking: &Booking, inventory: &[GpuState]) -> Vec<String> {
    booking
        .gpus
        .iter()
        .filter_map(|card| {
            let gpu = inventory
                .iter()
                .find(|g| g.info.node == card.node && g.info.uuid == card.uuid)?;
            let others: Vec<String> = gpu
                .processes
                .iter()
                .filter(|p| {
                    use lanes_types::ProcessLane::{Booked, Job};
                    !p.simulated && !matches!(p.lane, Some(Booked | Job { .. }))
                })
                .map(|p| {
                    format!(
                        "{} (pid {}, {})",
                        p.command.as_deref().unwrap_or("?"),
                        p.pid,
                        p.user.as_deref().unwrap_or("owner unknown")
                    )
                })
                .collect();
            (!others.is_empty()).then(|| {
                format!(
                    "note: {} already runs {}; the lab's policy deals with unbooked use once your booking starts",
                    output::card_name(card, inventory),
                    others.join(", ")
                )
            })
        })
        .collect()
}

/// What `--lend` and `--no-lend` ask for (neither: the portal's default).
fn lend_choice(args: &BookArgs) -> Option<bool> {
    match (args.lend, args.no_lend) {
        (true, _) => Some(true),
        (_, true) => Some(false),
        _ => None,
    }
}

/// A booking of a window's cards, by name.
fn named(slot: &FreeSlot, note: String) -> CreateBooking {
    CreateBooking {
        project: None,
        gpus: Some(slot.gpus.iter().map(|g| g.uuid.clone()).collect()),
        count: None,
        start: slot.start.max(Utc::now()),
        end: slot.end,
        note,
        user: None,
        lend: None,
    }
}

pub async fn slots(args: SlotsArgs) -> Result<()> {
    let client = config::client()?;
    let now = Utc::now();
    let from = args.from.as_deref().map(|t| when_arg(t, now)).transpose()?;
    let to = args.to.as_deref().map(|t| when_arg(t, now)).transpose()?;
    let query = slot_query(
        args.gpus,
        args.length,
        from,
        to,
        args.node,
        args.min_memory,
        args.limit,
    );
    let (found, inventory) = tokio::try_join!(client.slots(&query), client.gpus())?;
    if args.common.json {
        output::json(&found);
        return Ok(());
    }
    if found.is_empty() {
        return Err(CliError::refused(format!(
            "no window of {} for {} in that range",
            lanes_types::units::cards(args.gpus),
            lanes_types::units::format_duration(args.length)
        )));
    }
    for slot in &found {
        output::print(&format!("{}\n", describe_slot(slot, &inventory)));
    }
    Ok(())
}

pub async fn list(args: BookingsArgs) -> Result<()> {
    let client = config::client()?;
    let now = Utc::now();
    let me = client.me().await?;
    let query = BookingQuery {
        from: Some(if args.past {
            now - Duration::days(7)
        } else {
            now
        }),
        user: (!args.all).then(|| me.username.clone()),
        ..Default::default()
    };
    let (bookings, inventory) = tokio::try_join!(client.bookings(&query), client.gpus())?;
    if args.common.json {
        output::json(&bookings);
        return Ok(());
    }
    let mut table = Table::new(&["ID", "USER", "STATE", "CARDS", "START", "END", "NOTE"]);
    for b in &bookings {
        let style = match b.state {
            BookingState::Active => GREEN,
            BookingState::Upcoming => CYAN,
            _ => DIM,
        };
        table.row(vec![
            cell(b.id.to_string()).right(),
            cell(&b.username),
            cell(b.state.as_str()).styled(style),
            cell(output::cards_name(&b.gpus, &inventory)),
            cell(output::when(b.start)),
            cell(output::when(b.end)),
            cell(match (b.queue_job, b.loan_of, b.lent_to) {
                (Some(job), Some(host), _) => format!("queue job {job} on #{host}'s idle cards"),
                (Some(job), None, _) => format!("queue job {job}"),
                (None, _, Some(job)) => format!("lent to queue job {job} · {}", b.note),
                (None, _, None) if b.lend => format!("lends while idle · {}", b.note),
                (None, _, None) => b.note.clone(),
            }),
        ]);
    }
    if table.is_empty() {
        output::say("no bookings (book with `lanes book --gpus N --for 4h`)");
    } else {
        output::print(&table.render());
    }
    Ok(())
}

pub async fn extend(args: ExtendArgs) -> Result<()> {
    let client = config::client()?;
    let booking = client.booking(args.id).await?;
    let extended = client
        .extend_booking(
            args.id,
            &ExtendBooking {
                end: booking.end + args.by,
            },
        )
        .await?;
    let inventory = client.gpus().await?;
    if args.common.json {
        output::json(&extended);
    } else {
        output::say(&format!("Extended {}", describe(&extended, &inventory)));
    }
    Ok(())
}

/// `lanes reclaim ID`: takes back what the booking lends now.
pub async fn reclaim(args: IdArgs) -> Result<()> {
    let client = config::client()?;
    let before = client.booking(args.id).await?;
    let after = client.reclaim_booking(args.id).await?;
    if args.common.json {
        output::json(&after);
    } else {
        output::say(&match before.lent_to {
            Some(job) => format!(
                "Taking back booking {}'s cards from queue job {job}: it has the queue's grace to \
                 checkpoint and go",
                args.id
            ),
            None => format!("Booking {} lends nothing now", args.id),
        });
    }
    Ok(())
}

/// What the person meant: give back an active booking, or cancel one not begun.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Withdraw {
    Release,
    Cancel,
}

pub async fn withdraw(args: IdArgs, meant: Withdraw) -> Result<()> {
    let client = config::client()?;
    let booking = client.booking(args.id).await?;
    match (meant, booking.state) {
        (Withdraw::Release, BookingState::Upcoming) => {
            return Err(CliError::refused(format!(
                "booking {} has not started (it starts {}); `lanes cancel {}` cancels it",
                args.id,
                output::when(booking.start),
                args.id
            )))
        }
        (Withdraw::Cancel, BookingState::Active) => {
            return Err(CliError::refused(format!(
                "booking {} is running until {}; `lanes release {}` gives it back now",
                args.id,
                output::when(booking.end),
                args.id
            )))
        }
        _ => {}
    }
    let done = client.withdraw_booking(args.id).await?;
    if args.common.json {
        output::json(&done);
    } else {
        let inventory = client.gpus().await.unwrap_or_default();
        output::say(&format!(
            "{} {}",
            match done.state {
                BookingState::Released => "Released",
                _ => "Cancelled",
            },
            describe(&done, &inventory)
        ));
    }
    Ok(())
}
