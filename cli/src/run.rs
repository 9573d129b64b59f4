//! `lanes run` and `lanes env`: a command in the user's own shell, on this node, under the mask
//! of a booking. `run` uses the caller's active booking here, or books N cards of this node
//! from now, runs the command with `CUDA_VISIBLE_DEVICES` naming exactly those cards (UUIDs, PCI
//! order), stops it when the booking ends, releases a booking it made, and exits with the
//! command's status.
//!
//! The mask is the boundary here, not a device cgroup: the command is the user's own process,
//! which Lanes did not start. The node's watchdog still judges every process on every card, so
//! use of cards outside the booking is caught as unbooked use.

use crate::bookings::describe;
use crate::error::{CliError, Result};
use crate::output::{self, DIM};
use crate::{config, duration_arg, Common};
use chrono::{Duration, Utc};
use clap::Args;
use lanes_client::Client;
use lanes_types::booking::{Booking, BookingState, CreateBooking, GpuRef};
use lanes_types::query::{BookingQuery, SlotQuery};
use lanes_types::GpuState;
use std::process::ExitCode;

#[derive(Debug, Args)]
pub struct RunArgs {
    /// Book this many cards of this node from now for --for, and release them when the
    /// command ends.
    #[arg(long, short = 'g', conflicts_with = "booking", value_parser = crate::count_arg)]
    pub gpus: Option<u32>,
    /// Run inside this booking of yours (default: your active booking on this node).
    #[arg(long, short)]
    pub booking: Option<i64>,
    /// How long a booking made by --gpus lasts.
    #[arg(long = "for", default_value = "1h", value_parser = duration_arg)]
    pub length: Duration,
    /// This host's node name, as the portal knows it [default: the host name].
    #[arg(long, env = "LANES_NODE")]
    pub node: Option<String>,
    /// How long the command has between SIGTERM and SIGKILL when its booking ends.
    #[arg(long, default_value = "30s", value_parser = duration_arg)]
    pub grace: Duration,
    /// With --image the command runs in a container the node's Lanes starts as you, inside
    /// the booking's device wall, and its output follows here.
    #[command(flatten)]
    pub container: crate::jobs::ContainerArgs,
    #[command(flatten)]
    pub common: Common,
    /// The command and its arguments (after `--`).
    #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true, num_args = 1..)]
    pub command: Vec<String>,
}

#[derive(Debug, Args)]
pub struct EnvArgs {
    /// This booking of yours (default: your active booking on this node).
    #[arg(long, short)]
    pub booking: Option<i64>,
    /// This host's node name, as the portal knows it [default: the host name].
    #[arg(long, env = "LANES_NODE")]
    pub node: Option<String>,
    #[command(flatten)]
    pub common: Common,
}

/// The node this host is, checked against the portal's list of nodes.
async fn this_node(client: &Client, named: Option<String>) -> Result<String> {
    let name = match named {
        Some(name) => name,
        None => nix::unistd::gethostname()
            .ok()
            .and_then(|h| h.into_string().ok())
            .ok_or_else(|| CliError::usage("cannot read this host's name; pass --node"))?,
    };
    let nodes = client.nodes().await?;
    if nodes.iter().any(|n| n.name == name && n.cards > 0) {
        return Ok(name);
    }
    let names: Vec<&str> = nodes
        .iter()
        .filter(|n| n.cards > 0)
        .map(|n| n.name.as_str())
        .collect();
    Err(CliError::refused(format!(
        "this host ({name}) is not a GPU node of the portal at {} (its nodes: {}); `lanes run` \
         uses this host's cards, so run it on one of them (or name this host's node with \
         --node), or queue the job from here with `lanes submit`",
        client.base(),
        if names.is_empty() {
            "none".to_string()
        } else {
            names.join(", ")
        }
    )))
}

/// The caller's booking to use: the one named, or their only active booking on `node`.
async fn chosen_booking(
    client: &Client,
    me: &lanes_types::account::User,
    id: Option<i64>,
    node: &str,
) -> Result<Booking> {
    let now = Utc::now();
    let booking = match id {
        Some(id) => client.booking(id).await?,
        None => {
            let mine = client
                .bookings(&BookingQuery {
                    from: Some(now),
                    to: Some(now + Duration::seconds(1)),
                    user: Some(me.username.clone()),
                    ..Default::default()
                })
                .await?;
            let here: Vec<Booking> = mine
                .into_iter()
                .filter(|b| b.state == BookingState::Active)
                .filter(|b| b.gpus.iter().all(|g| g.node == node))
                .collect();
            match here.len() {
                0 => {
                    return Err(CliError::refused(format!(
                        "you hold no active booking on {node}; `lanes run --gpus N -- CMD` books \
                         cards for the command, `lanes bookings` lists yours"
                    )))
                }
                1 => here.into_iter().next().expect("one"),
                _ => {
                    let ids: Vec<String> = here.iter().map(|b| format!("#{}", b.id)).collect();
                    return Err(CliError::usage(format!(
                        "you hold several active bookings on {node} ({}): choose one with --booking ID",
                        ids.join(", ")
                    )));
                }
            }
        }
    };
    check_usable(&booking, me, node)?;
    Ok(booking)
}

/// Whether `me` can run on `booking` here, now.
fn check_usable(booking: &Booking, me: &lanes_types::account::User, node: &str) -> Result<()> {
    if booking.user_id != me.id {
        return Err(CliError::refused(format!(
            "booking {} is {}'s, not yours",
            booking.id, booking.username
        )));
    }
    match booking.state {
        BookingState::Active => {}
        BookingState::Upcoming => {
            return Err(CliError::refused(format!(
                "booking {} starts {}; run the command then",
                booking.id,
                output::when(booking.start)
            )))
        }
        other => {
            return Err(CliError::refused(format!(
                "booking {} is {} and holds no cards",
                booking.id,
                other.as_str()
            )))
        }
    }
    let elsewhere: Vec<&GpuRef> = booking.gpus.iter().filter(|g| g.node != node).collect();
    if let Some(gpu) = elsewhere.first() {
        return Err(CliError::refused(format!(
            "booking {}'s cards are on {}, not on this host ({node}): run the command there, or \
             submit it into the booking from here with `lanes submit --booking {} -- CMD`",
            booking.id, gpu.node, booking.id
        )));
    }
    Ok(())
}

/// Books `count` cards of `node` from now for `length`: cards free now, named, so that they
/// are this node's. Another booking may take them between the search and the booking (two
/// `lanes run` at once): then it searches again.
pub(crate) async fn book_here(
    client: &Client,
    node: Option<&str>,
    count: u32,
    length: Duration,
    note: String,
) -> Result<Booking> {
    for _ in 0..5 {
        match try_book_here(client, node, count, length, note.clone()).await {
            Err(Taken::Conflict) => continue,
            Err(Taken::Other(e)) => return Err(e),
            Ok(booking) => return Ok(booking),
        }
    }
    Err(CliError::refused(format!(
        "{count} cards of {} were taken by others each time they were found free; try again",
        node.unwrap_or("the pool")
    )))
}

/// Why a booking of cards found free was not made.
enum Taken {
    /// Another booking took them first.
    Conflict,
    Other(CliError),
}

impl From<lanes_client::ClientError> for Taken {
    fn from(e: lanes_client::ClientError) -> Self {
        if e.status().is_some_and(|s| s.as_u16() == 409) {
            Taken::Conflict
        } else {
            Taken::Other(e.into())
        }
    }
}

async fn try_book_here(
    client: &Client,
    node: Option<&str>,
    count: u32,
    length: Duration,
    note: String,
) -> std::result::Result<Booking, Taken> {
    let now = Utc::now();
    let query = SlotQuery {
        gpus: count,
        duration: format!("{}s", length.num_seconds()),
        from: Some(now),
        to: None,
        node: node.map(str::to_string),
        min_memory: None,
        limit: Some(1),
    };
    let (place, node_flag) = match node {
        Some(node) => (node.to_string(), format!(" --node {node}")),
        None => ("the pool".to_string(), String::new()),
    };
    let slot = client.slots(&query).await?.into_iter().next();
    let slot = match slot {
        Some(slot) if slot.start <= now + Duration::minutes(1) => slot,
        later => return Err(Taken::Other(CliError::refused(format!(
            "{count} cards of {place} are not free for the next {}; {}",
            lanes_types::units::format_duration(length),
            match later {
                Some(slot) => format!(
                    "the earliest window is {}–{} (`lanes book --gpus {count}{node_flag} --earliest` books it)",
                    output::when(slot.start),
                    output::when(slot.end)
                ),
                None => "none opens within a week (`lanes status` shows who holds them)".into(),
            }
        )))),
    };
    Ok(client
        .book(&CreateBooking {
            project: None,
            gpus: Some(slot.gpus.iter().map(|g| g.uuid.clone()).collect()),
            count: None,
            start: Utc::now(),
            end: Utc::now() + length,
            note,
            user: None,
            lend: None,
        })
        .await?)
}

/// The mask of `booking`'s cards: their UUIDs in PCI bus order, as CUDA numbers them under
/// `CUDA_DEVICE_ORDER=PCI_BUS_ID`, and the booking's facts.
pub fn environment(booking: &Booking, inventory: &[GpuState]) -> Result<Vec<(String, String)>> {
    let mut cards: Vec<&GpuState> = Vec::new();
    for gpu in &booking.gpus {
        let card = inventory
            .iter()
            .find(|g| g.info.node == gpu.node && g.info.uuid == gpu.uuid)
            .ok_or_else(|| {
                CliError::refused(format!(
                    "card {} of booking {} is not in the pool's inventory",
                    gpu.uuid, booking.id
                ))
            })?;
        cards.push(card);
    }
    cards.sort_by_key(|g| g.info.pci_bus_id.to_lowercase());
    let mask = cards
        .iter()
        .map(|g| g.info.uuid.as_str())
        .collect::<Vec<_>>()
        .join(",");
    Ok(vec![
        ("CUDA_VISIBLE_DEVICES".into(), mask.clone()),
        ("NVIDIA_VISIBLE_DEVICES".into(), mask),
        ("CUDA_DEVICE_ORDER".into(), "PCI_BUS_ID".into()),
        ("LANES_BOOKING_ID".into(), booking.id.to_string()),
        (
            "LANES_BOOKING_END".into(),
            booking
                .end
                .to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        ),
    ])
}

pub async fn env(args: EnvArgs) -> Result<()> {
    let client = config::client()?;
    let node = this_node(&client, args.node).await?;
    let me = client.me().await?;
    let booking = chosen_booking(&client, &me, args.booking, &node).await?;
    let vars = environment(&booking, &client.gpus().await?)?;
    if args.common.json {
        let map: serde_json::Map<String, serde_json::Value> = vars
            .into_iter()
            .map(|(k, v)| (k, serde_json::Value::String(v)))
            .collect();
        output::json(&map);
    } else {
        let mut text = String::new();
        for (name, value) in vars {
            text.push_str(&format!("export {name}={}\n", shell_quoted(&value)));
        }
        print!("{text}");
    }
    Ok(())
}

/// `value` as one word for a POSIX shell: in single quotes, each `'` written as `'\''`, so
/// `eval "$(lanes env)"` sets exactly the value whatever it holds.
fn shell_quoted(value: &str) -> String {
    format!("'{}'", value.replace('\'', r"'\''"))
}

/// Signals `lanes run` passes on to its command when another process sent them to it. A
/// terminal's Ctrl-C reaches the whole foreground group, the command included, so it is not
/// sent twice.
const FORWARDED: [i32; 4] = [
    signal_hook::consts::SIGINT,
    signal_hook::consts::SIGTERM,
    signal_hook::consts::SIGHUP,
    signal_hook::consts::SIGQUIT,
];

/// Whether `signal` is ignored, as `nohup` or a shell's `&` leaves SIGHUP or SIGINT: such a
/// signal stays ignored, for `lanes run` and for its command.
fn ignored(signal: i32) -> bool {
    use nix::libc;
    // SAFETY: a null new action only reads the current one into `old`.
    unsafe {
        let mut old: libc::sigaction = std::mem::zeroed();
        libc::sigaction(signal, std::ptr::null(), &mut old) == 0
            && old.sa_sigaction == libc::SIG_IGN
    }
}

pub async fn run(args: RunArgs) -> Result<ExitCode> {
    let container = args.container.spec()?;
    let client = config::client()?;
    let node = this_node(&client, args.node.clone()).await?;
    let me = client.me().await?;
    let (booking, made) = match args.gpus {
        Some(count) => {
            let note = format!("lanes run: {}", args.command.join(" "));
            let note: String = note.chars().take(200).collect();
            (
                book_here(&client, Some(&node), count, args.length, note).await?,
                true,
            )
        }
        None => (
            chosen_booking(&client, &me, args.booking, &node).await?,
            false,
        ),
    };
    // From here on a booking this command made is released whatever happens.
    let outcome = match container {
        Some(spec) => run_container(&client, &booking, &args, spec).await,
        None => run_in(&client, &booking, &args).await,
    };
    if made {
        match client.withdraw_booking(booking.id).await {
            Ok(_) => say(&args, &format!("released booking #{}", booking.id)),
            Err(e) => output::say(&format!(
                "lanes: warning: could not release booking #{} ({}); `lanes release {}` gives it back",
                booking.id,
                CliError::from(e),
                booking.id
            )),
        }
    }
    outcome
}

fn say(args: &RunArgs, text: &str) {
    if !args.common.json {
        output::say(&format!("{DIM}lanes: {text}{DIM:#}"));
    }
}

/// The command in a container: a job the node's runner starts in the booking (only it can
/// put the container inside the booking's cgroup and device wall), its output followed here
/// to its end.
async fn run_container(
    client: &Client,
    booking: &Booking,
    args: &RunArgs,
    container: lanes_types::container::ContainerSpec,
) -> Result<ExitCode> {
    let cwd = std::env::current_dir()
        .ok()
        .and_then(|d| d.to_str().map(str::to_string));
    say(
        args,
        &format!(
            "booking {}; {} with {}",
            describe(booking, &client.gpus().await?),
            container.image,
            container.runtime()
        ),
    );
    let job = client
        .submit_job(&lanes_types::job::CreateJob {
            booking_id: booking.id,
            argv: args.command.clone(),
            cwd,
            env: None,
            environment: None,
            name: None,
            container: Some(container),
            notice: None,
            session: None,
        })
        .await?;
    say(args, &format!("job {}", job.id));
    crate::jobs::follow(client, job.id, &Default::default()).await
}

async fn run_in(client: &Client, booking: &Booking, args: &RunArgs) -> Result<ExitCode> {
    let inventory = client.gpus().await?;
    let vars = environment(booking, &inventory)?;
    if args.common.json {
        output::say(
            &serde_json::json!({ "booking": booking, "environment": vars.iter().cloned().collect::<std::collections::BTreeMap<_, _>>() })
                .to_string(),
        );
    } else {
        say(
            args,
            &format!(
                "booking {}; CUDA_VISIBLE_DEVICES={}",
                describe(booking, &inventory),
                vars[0].1
            ),
        );
    }
    let mut signals = signal_hook::iterator::SignalsInfo::<
        signal_hook::iterator::exfiltrator::WithOrigin,
    >::new(FORWARDED.into_iter().filter(|&s| !ignored(s)))
    .map_err(|e| CliError::usage(format!("cannot watch signals: {e}")))?;
    let handle = signals.handle();
    let mut child = match tokio::process::Command::new(&args.command[0])
        .args(&args.command[1..])
        .envs(vars.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .spawn()
    {
        Ok(child) => child,
        Err(e) => {
            handle.close();
            output::say(&format!("lanes: cannot run {}: {e}", args.command[0]));
            // As shells answer: 127 not found, 126 found but not runnable.
            return Ok(ExitCode::from(
                if e.kind() == std::io::ErrorKind::NotFound {
                    127
                } else {
                    126
                },
            ));
        }
    };
    let pid = child.id().map(|p| nix::unistd::Pid::from_raw(p as i32));
    let (tx, mut received) = tokio::sync::mpsc::unbounded_channel();
    let watcher = std::thread::spawn(move || {
        for origin in signals.forever() {
            if tx.send(origin).is_err() {
                break;
            }
        }
    });
    let send = |signal: nix::sys::signal::Signal| {
        if let Some(pid) = pid {
            let _ = nix::sys::signal::kill(pid, signal);
        }
    };
    let mut end = booking.end;
    let mut stopping: Option<tokio::time::Instant> = None;
    let mut check = tokio::time::interval(std::time::Duration::from_secs(30));
    let status = loop {
        let until_end = (end - Utc::now()).to_std().unwrap_or_default();
        tokio::select! {
            status = child.wait() => break status,
            Some(origin) = received.recv() => {
                let from_terminal = origin.cause == signal_hook::low_level::siginfo::Cause::Kernel;
                if !from_terminal {
                    if let Ok(signal) = nix::sys::signal::Signal::try_from(origin.signal) {
                        send(signal);
                    }
                }
            }
            _ = check.tick() => {
                // Extended or released on the web meanwhile?
                if let Ok(now) = client.booking(booking.id).await {
                    end = if now.state.holds_cards() { now.end } else { now.end.min(Utc::now()) };
                }
            }
            _ = tokio::time::sleep(until_end), if stopping.is_none() => {
                if let Ok(now) = client.booking(booking.id).await {
                    if now.state.holds_cards() && now.end > Utc::now() {
                        end = now.end;
                        continue;
                    }
                }
                say(args, &format!(
                    "booking #{} ended; stopping the command (SIGKILL in {})",
                    booking.id,
                    lanes_types::units::format_duration(args.grace)
                ));
                send(nix::sys::signal::Signal::SIGTERM);
                stopping = Some(tokio::time::Instant::now() + args.grace.to_std().unwrap_or_default());
            }
            _ = tokio::time::sleep_until(stopping.unwrap_or_else(tokio::time::Instant::now)), if stopping.is_some() => {
                send(nix::sys::signal::Signal::SIGKILL);
                stopping = Some(tokio::time::Instant::now() + std::time::Duration::from_secs(3600));
            }
        }
    };
    handle.close();
    let _ = watcher.join();
    let status = status.map_err(|e| CliError::usage(format!("waiting for the command: {e}")))?;
    use std::os::unix::process::ExitStatusExt;
    let code = match (status.code(), status.signal()) {
        (Some(code), _) => code,
        (None, Some(signal)) => 128 + signal,
        (None, None) => 1,
    };
    if args.common.json {
        output::say(&serde_json::json!({ "exit_code": code }).to_string());
    }
    Ok(ExitCode::from(code.clamp(0, 255) as u8))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What `sh` makes of a quoted value is the value, quotes and all.
    #[test]
    fn a_value_is_quoted_for_the_shell_whatever_it_holds() {
        for value in ["plain", "it's", "'", "a b;$(touch /tmp/x)`id`", "''\\'\n"] {
            let out = std::process::Command::new("sh")
                .arg("-c")
                .arg(format!("printf %s {}", shell_quoted(value)))
                .output()
                .unwrap();
            assert_eq!(String::from_utf8(out.stdout).unwrap(), value);
        }
    }
    use lanes_types::{GpuInfo, Health};

    fn card(index: u32, bus: &str) -> GpuState {
        GpuState {
            info: GpuInfo {
                node: "n1".into(),
                uuid: format!("GPU-{index}"),
                index,
                name: "H200".into(),
                pci_bus_id: bus.into(),
                memory_total_bytes: 1,
            },
            health: Health::Ok,
            sample: None,
            processes: Vec::new(),
            idle_booking: None,
            unmanaged: false,
            condition: Default::default(),
            counters: None,
        }
    }

    #[test]
    fn the_mask_names_the_booked_cards_in_bus_order() {
        let inventory = [
            card(0, "00000000:18:00.0"),
            card(1, "00000000:2a:00.0"),
            card(2, "00000000:3A:00.0"),
        ];
        let now = Utc::now();
        let booking = Booking {
            id: 7,
            user_id: 1,
            username: "alice".into(),
            display_name: "alice".into(),
            gpus: ["GPU-2", "GPU-0"]
                .iter()
                .map(|u| GpuRef {
                    node: "n1".into(),
                    uuid: u.to_string(),
                })
                .collect(),
            start: now,
            end: now,
            state: BookingState::Active,
            created_at: now,
            ..Default::default()
        };
        let vars: std::collections::BTreeMap<_, _> = environment(&booking, &inventory)
            .unwrap()
            .into_iter()
            .collect();
        assert_eq!(vars["CUDA_VISIBLE_DEVICES"], "GPU-0,GPU-2");
        assert_eq!(vars["NVIDIA_VISIBLE_DEVICES"], "GPU-0,GPU-2");
        assert_eq!(vars["CUDA_DEVICE_ORDER"], "PCI_BUS_ID");
        assert_eq!(vars["LANES_BOOKING_ID"], "7");
    }
}
