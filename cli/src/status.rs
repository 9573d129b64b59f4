//! `lanes status`: every card of every node in one compact table, as `nvidia-smi` and `gpustat`
//! users expect, with who holds each card now and who is next; `--watch` redraws it from the
//! live telemetry channel.

use crate::error::Result;
use crate::output::{self, cell, Table, BOLD, CYAN, DIM, GREEN, PLAIN, RED, YELLOW};
use crate::{config, Common};
use chrono::{DateTime, Duration, Utc};
use clap::Args;
use lanes_types::booking::{holder_and_next, Booking, GpuRef};
use lanes_types::query::BookingQuery;
use lanes_types::{FleetSnapshot, GpuState, NodeState, NodeStatus, ProcessLane};

#[derive(Debug, Args)]
pub struct StatusArgs {
    /// Only this node.
    #[arg(long)]
    pub node: Option<String>,
    /// Redraw live (every reading) until Ctrl-C.
    #[arg(long, short)]
    pub watch: bool,
    #[command(flatten)]
    pub common: Common,
}

/// What the table is drawn from.
#[derive(Debug, serde::Serialize)]
pub struct Pool {
    pub nodes: Vec<NodeState>,
    pub gpus: Vec<GpuState>,
    /// Active and upcoming bookings of the next week.
    pub bookings: Vec<Booking>,
}

/// Bookings that hold cards now or within the week.
fn week_ahead() -> BookingQuery {
    let now = Utc::now();
    BookingQuery {
        from: Some(now),
        to: Some(now + Duration::days(7)),
        ..Default::default()
    }
}

async fn bookings_ahead(client: &lanes_client::Client) -> Result<Vec<Booking>> {
    Ok(client.bookings(&week_ahead()).await?)
}

pub async fn status(args: StatusArgs) -> Result<()> {
    let client = config::client()?;
    if args.watch {
        return watch(&client, &args).await;
    }
    let query = week_ahead();
    let (nodes, gpus, bookings) =
        tokio::try_join!(client.nodes(), client.gpus(), client.bookings(&query))?;
    let pool = Pool {
        nodes,
        gpus,
        bookings,
    };
    if args.common.json {
        output::json(&pool);
    } else {
        output::print(&render(&pool, args.node.as_deref(), Utc::now()));
    }
    Ok(())
}

async fn watch(client: &lanes_client::Client, args: &StatusArgs) -> Result<()> {
    use std::io::IsTerminal;
    let tty = std::io::stdout().is_terminal();
    let mut bookings = bookings_ahead(client).await?;
    let mut fleet: Option<FleetSnapshot> = None;
    let mut telemetry = client.telemetry().await?;
    let mut refreshed = tokio::time::Instant::now();
    let mut drawn = tokio::time::Instant::now() - std::time::Duration::from_secs(1);
    loop {
        tokio::select! {
            _ = tokio::signal::ctrl_c() => return Ok(()),
            message = telemetry.next() => {
                let message = match message {
                    Some(Ok(message)) => message,
                    Some(Err(e)) => return Err(e.into()),
                    None => {
                        output::say("lanes: the live connection closed; reconnecting");
                        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
                        telemetry = client.telemetry().await?;
                        continue;
                    }
                };
                match (&mut fleet, message) {
                    (_, lanes_types::TelemetryMessage::Snapshot(snapshot)) => fleet = Some(snapshot),
                    (Some(fleet), tick) => fleet.apply(tick),
                    (None, _) => continue,
                }
            }
        }
        if refreshed.elapsed() > std::time::Duration::from_secs(15) {
            bookings = bookings_ahead(client).await?;
            refreshed = tokio::time::Instant::now();
        }
        let Some(fleet) = &fleet else { continue };
        if drawn.elapsed() < std::time::Duration::from_millis(500) {
            continue;
        }
        drawn = tokio::time::Instant::now();
        let pool = Pool {
            nodes: fleet.nodes.clone(),
            gpus: fleet.gpus.clone(),
            bookings: bookings.clone(),
        };
        if args.common.json {
            // One object per line: a stream a script can read.
            println!("{}", serde_json::to_string(&pool).unwrap_or_default());
            continue;
        }
        let text = render(&pool, args.node.as_deref(), Utc::now());
        if tty {
            output::print(&format!(
                "\x1b[H\x1b[2J{text}{DIM}live · Ctrl-C ends{DIM:#}\n"
            ));
        } else {
            output::print(&format!("{text}\n"));
        }
    }
}

/// A card's load: high load on a booked card is the card doing its job (green, never red);
/// load on a card nobody booked is worth a look (yellow); an idle card is dim.
fn util_style(pct: u32, booked: bool) -> anstyle::Style {
    match (pct, booked) {
        (0..=9, _) => DIM,
        (_, true) => GREEN,
        (_, false) => YELLOW,
    }
}

/// The whole table, one section per node.
pub fn render(pool: &Pool, only_node: Option<&str>, now: DateTime<Utc>) -> String {
    let mut out = String::new();
    let mut names: Vec<&str> = pool.nodes.iter().map(|n| n.name.as_str()).collect();
    for gpu in &pool.gpus {
        if !names.contains(&gpu.info.node.as_str()) {
            names.push(&gpu.info.node);
        }
    }
    names.sort_unstable();
    for name in names {
        if only_node.is_some_and(|n| n != name) {
            continue;
        }
        let node = pool.nodes.iter().find(|n| n.name == name);
        let mut cards: Vec<&GpuState> = pool.gpus.iter().filter(|g| g.info.node == name).collect();
        cards.sort_by_key(|g| g.info.index);
        if cards.is_empty() && node.is_some_and(|n| n.cards == 0) {
            continue; // a portal without cards
        }
        let mut heading = format!("{BOLD}{name}{BOLD:#}");
        if let Some(node) = node {
            match node.status {
                NodeStatus::Up => heading.push_str(&format!(" · {GREEN}up{GREEN:#}")),
                NodeStatus::Unreachable => heading.push_str(&format!(
                    " · {RED}unreachable since {}{RED:#} (last values shown)",
                    output::when(node.last_seen)
                )),
            }
            heading.push_str(&format!(" · {}", node.driver));
        }
        let busy = cards
            .iter()
            .filter(|g| {
                g.sample
                    .as_ref()
                    .is_some_and(|s| s.utilization_gpu_pct >= 10)
            })
            .count();
        let plural = if cards.len() == 1 { "" } else { "s" };
        heading.push_str(&format!(" · {} card{plural}, {busy} busy\n", cards.len()));
        out.push_str(&heading);
        let mut table = Table::new(&[
            "GPU",
            "NAME",
            "UTIL",
            "MEMORY GiB",
            "TEMP",
            "POWER W",
            "NOW",
            "NEXT",
        ]);
        for gpu in cards {
            let card = GpuRef {
                node: gpu.info.node.clone(),
                uuid: gpu.info.uuid.clone(),
            };
            let (current, next) = holder_and_next(&pool.bookings, &card, now);
            let mut row = vec![
                cell(gpu.info.index.to_string()).right(),
                cell(gpu.info.name.trim_start_matches("NVIDIA ")),
            ];
            match (&gpu.health, &gpu.sample) {
                (lanes_types::Health::Unhealthy { reason }, _) => {
                    row.push(cell("!").styled(RED).right());
                    row.push(cell(format!("unhealthy: {reason}")).styled(RED));
                    row.extend([cell(""), cell("")]);
                }
                (_, Some(s)) => {
                    row.push(
                        cell(format!("{}%", s.utilization_gpu_pct))
                            .styled(util_style(s.utilization_gpu_pct, current.is_some()))
                            .right(),
                    );
                    row.push(
                        cell(format!(
                            "{}/{}",
                            output::gib(s.memory_used_bytes),
                            output::gib(gpu.info.memory_total_bytes)
                        ))
                        .right(),
                    );
                    row.push(
                        cell(s.temperature_c.map_or("-".into(), |t| format!("{t}°C"))).styled(
                            if s.temperature_c.is_some_and(|t| t >= 85) {
                                RED
                            } else {
                                PLAIN
                            },
                        ),
                    );
                    row.push(
                        cell(match (s.power_watts, s.power_limit_watts) {
                            (Some(p), Some(l)) => format!("{p:.0}/{l:.0}"),
                            (Some(p), None) => format!("{p:.0}"),
                            _ => "-".into(),
                        })
                        .right(),
                    );
                }
                (_, None) => row.extend([cell("-"), cell("-"), cell("-"), cell("-")]),
            }
            row.push(match (gpu.unmanaged, current) {
                (true, _) => cell("unmanaged").styled(DIM),
                (false, Some(b)) => {
                    let idle = gpu.idle_booking == Some(b.id);
                    cell(format!(
                        "{} until {}{}",
                        b.username,
                        output::when(b.end),
                        if idle { " (idle)" } else { "" }
                    ))
                    .styled(if idle { YELLOW } else { CYAN })
                }
                (false, None) => cell("free").styled(GREEN),
            });
            row.push(match next {
                Some(b) => cell(format!("{} {}", b.username, output::when(b.start))),
                None => cell("-").styled(DIM),
            });
            table.row(row);
            if !gpu.condition.is_healthy() {
                let failing = gpu.condition.level == lanes_types::health::HealthLevel::Failing;
                table.note(
                    format!(
                        "      ! {}: {}",
                        gpu.condition.level.as_str().to_uppercase(),
                        gpu.condition.words()
                    ),
                    if failing { RED } else { YELLOW },
                );
            }
            for p in &gpu.processes {
                let (label, style) = match p.lane {
                    Some(ProcessLane::Job { id }) => (format!("job {id}"), PLAIN),
                    Some(ProcessLane::Booked) => ("booked".into(), PLAIN),
                    Some(ProcessLane::Exempt) => ("exempt".into(), DIM),
                    Some(ProcessLane::Unbooked) => ("UNBOOKED".into(), RED),
                    Some(ProcessLane::Simulated) => ("simulated".into(), DIM),
                    None if p.simulated => ("simulated".into(), DIM),
                    None => (String::new(), PLAIN),
                };
                table.note(
                    format!(
                        "      └ pid {} {} {}{} {} {}",
                        p.pid,
                        match (&p.user, &p.container) {
                            (Some(user), _) => user.as_str(),
                            (None, Some(_)) => "(owner unknown)",
                            (None, None) => "?",
                        },
                        p.command.as_deref().unwrap_or("?"),
                        p.container
                            .as_ref()
                            .map_or(String::new(), |c| format!(" in {}", c.describe())),
                        p.used_memory_bytes
                            .map_or(String::new(), |b| format!("{} GiB", output::gib(b))),
                        label
                    )
                    .trim_end()
                    .to_string(),
                    style,
                );
            }
        }
        out.push_str(&table.render());
        out.push('\n');
    }
    if out.is_empty() {
        out.push_str(match only_node {
            Some(_) => "no such node\n",
            None => "no cards in the pool yet\n",
        });
    } else {
        out.push_str(&format!("{DIM}times in {}{DIM:#}\n", output::zone()));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use lanes_types::booking::{BookingState, GpuRef};
    use lanes_types::{GpuInfo, GpuProcess, GpuSample, Health};

    fn gpu(node: &str, index: u32, util: u32) -> GpuState {
        GpuState {
            info: GpuInfo {
                node: node.into(),
                uuid: format!("GPU-{node}-{index}"),
                index,
                name: "NVIDIA H200".into(),
                pci_bus_id: format!("00000000:{index:02X}:00.0"),
                memory_total_bytes: 140 << 30,
            },
            health: Health::Ok,
            sample: Some(GpuSample {
                at_ms: 0,
                utilization_gpu_pct: util,
                utilization_memory_pct: 0,
                memory_used_bytes: 10 << 30,
                temperature_c: Some(50),
                power_watts: Some(300.0),
                power_limit_watts: Some(700.0),
                sm_clock_mhz: None,
                energy_mj: None,
            }),
            processes: vec![GpuProcess {
                pid: 42,
                used_memory_bytes: Some(1 << 30),
                user: Some("mallory".into()),
                command: Some("miner".into()),
                lane: Some(ProcessLane::Unbooked),
                sm_pct: None,
                mem_pct: None,
                simulated: false,
                container: None,
            }],
            idle_booking: None,
            unmanaged: false,
            condition: Default::default(),
            counters: None,
        }
    }

    fn booking(
        id: i64,
        user: &str,
        uuid: &str,
        from_h: i64,
        to_h: i64,
        now: DateTime<Utc>,
    ) -> Booking {
        Booking {
            id,
            user_id: id,
            username: user.into(),
            display_name: user.into(),
            gpus: vec![GpuRef {
                node: "a".into(),
                uuid: uuid.into(),
            }],
            start: now + Duration::hours(from_h),
            end: now + Duration::hours(to_h),
            state: if from_h <= 0 {
                BookingState::Active
            } else {
                BookingState::Upcoming
            },
            created_at: now,
            ..Default::default()
        }
    }

    #[test]
    fn each_card_shows_its_holder_its_next_booking_and_its_processes() {
        let now = Utc::now();
        let pool = Pool {
            nodes: Vec::new(),
            gpus: vec![gpu("a", 1, 95), gpu("a", 0, 0)],
            bookings: vec![
                booking(1, "alice", "GPU-a-1", -1, 2, now),
                booking(2, "bob", "GPU-a-1", 3, 4, now),
            ],
        };
        let text = render(&pool, None, now);
        let lines: Vec<&str> = text.lines().collect();
        // Cards in index order; card 1 is alice's now and bob's next.
        assert!(lines[2].trim_start().starts_with('0'), "{text}");
        assert!(lines[2].contains("free"));
        let card1 = lines.iter().find(|l| l.contains("alice")).unwrap();
        assert!(card1.contains("95%") && card1.contains("bob"), "{card1}");
        assert!(text.contains("pid 42 mallory miner 1.0 GiB UNBOOKED"));
        assert!(render(&pool, Some("b"), now).contains("no such node"));
    }

    #[test]
    fn a_failing_or_degraded_card_says_why_under_its_row() {
        let now = Utc::now();
        let mut failing = gpu("a", 0, 0);
        failing.condition = lanes_types::health::Condition {
            level: lanes_types::health::HealthLevel::Failing,
            findings: vec![lanes_types::health::Finding::Xid { xid: 79 }],
        };
        let pool = Pool {
            nodes: Vec::new(),
            gpus: vec![failing, gpu("a", 1, 0)],
            bookings: Vec::new(),
        };
        let text = render(&pool, None, now);
        assert!(
            text.contains("! FAILING: Xid 79: GPU has fallen off the bus"),
            "{text}"
        );
        assert_eq!(text.matches("! ").count(), 1, "{text}");
    }
}
