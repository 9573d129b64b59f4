//! `lanes history` and `lanes report`: looking back at how the cards were used.

use crate::error::{CliError, Result};
use crate::output::{self, cell, Table, BOLD, DIM};
use crate::{config, duration_arg, time, Common};
use chrono::{Duration, Utc};
use clap::Args;
use lanes_types::history::HistorySeries;
use lanes_types::query::{HistoryQuery, ReportQuery};

#[derive(Debug, Args)]
pub struct HistoryArgs {
    /// Only this node's cards.
    #[arg(long, short)]
    pub node: Option<String>,
    /// Only this card: its index (with --node, or on the only node) or its UUID.
    #[arg(long)]
    pub gpu: Option<String>,
    /// How far back (24h, 7d).
    #[arg(long, default_value = "1h", value_parser = duration_arg)]
    pub since: Duration,
    /// utilization, memory, temperature or power.
    #[arg(long, default_value = "utilization")]
    pub metric: String,
    /// Characters of chart per card.
    #[arg(long, default_value_t = 60)]
    pub width: usize,
    #[command(flatten)]
    pub common: Common,
}

#[derive(Debug, Args)]
pub struct ReportArgs {
    /// Start of the range [default: 7 days ago].
    #[arg(long)]
    pub from: Option<String>,
    /// End of the range [default: now].
    #[arg(long)]
    pub to: Option<String>,
    /// The CSV the portal exports, as is.
    #[arg(long, conflicts_with = "json")]
    pub csv: bool,
    #[command(flatten)]
    pub common: Common,
}

const BARS: [char; 8] = ['▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];

/// A chart of `values` (None: no reading) in `width` characters, scaled to `0..=top`.
pub fn sparkline(values: &[Option<f64>], width: usize, top: f64) -> String {
    if values.is_empty() || width == 0 {
        return String::new();
    }
    (0..width.min(values.len()))
        .map(|i| {
            // Each character is the mean of its share of the values.
            let from = i * values.len() / width.min(values.len());
            let to = ((i + 1) * values.len() / width.min(values.len())).max(from + 1);
            let part: Vec<f64> = values[from..to].iter().flatten().copied().collect();
            if part.is_empty() {
                return ' ';
            }
            let mean = part.iter().sum::<f64>() / part.len() as f64;
            let level = if top > 0.0 { mean / top } else { 0.0 };
            BARS[((level * 7.0).round().clamp(0.0, 7.0)) as usize]
        })
        .collect()
}

pub async fn history(args: HistoryArgs) -> Result<()> {
    let client = config::client()?;
    let now = Utc::now();
    let inventory = client.gpus().await?;
    let mut cards: Vec<&lanes_types::GpuState> = inventory
        .iter()
        .filter(|g| args.node.as_ref().is_none_or(|n| &g.info.node == n))
        .collect();
    if let Some(wanted) = &args.gpu {
        cards.retain(|g| &g.info.uuid == wanted || &g.info.index.to_string() == wanted);
        let nodes: std::collections::BTreeSet<&str> =
            cards.iter().map(|g| g.info.node.as_str()).collect();
        if nodes.len() > 1 {
            return Err(CliError::usage(format!(
                "GPU {wanted} is on several nodes ({}): say which with --node",
                nodes.into_iter().collect::<Vec<_>>().join(", ")
            )));
        }
    }
    if cards.is_empty() {
        return Err(CliError::usage("no such card (see `lanes status`)"));
    }
    let query = HistoryQuery {
        gpu: match cards.as_slice() {
            [one] => Some(one.info.uuid.clone()),
            _ => None,
        },
        metric: Some(args.metric.clone()),
        from: Some(now - args.since),
        to: Some(now),
        points: Some(args.width.clamp(1, 1000) as i64 * 4),
    };
    let answer = client.history(&query).await?;
    let series: Vec<&HistorySeries> = answer
        .series
        .iter()
        .filter(|s| {
            cards
                .iter()
                .any(|g| g.info.node == s.node && g.info.uuid == s.uuid)
        })
        .collect();
    if args.common.json {
        output::json(&answer);
        return Ok(());
    }
    let top = match args.metric.as_str() {
        "utilization" => 100.0,
        _ => series
            .iter()
            .flat_map(|s| s.points.iter().map(|p| p.max))
            .fold(0.0, f64::max),
    };
    let mut text = format!(
        "{BOLD}{}{BOLD:#} from {} to {} ({} buckets of {}; {})\n",
        answer.metric,
        output::when(now - args.since),
        output::when(now),
        answer.resolution,
        lanes_types::units::format_duration(Duration::seconds(answer.bucket_s)),
        output::zone()
    );
    let mut table = Table::new(&["CARD", "CHART", "AVG", "MAX"]);
    cards.sort_by(|a, b| (&a.info.node, a.info.index).cmp(&(&b.info.node, b.info.index)));
    for card in cards {
        let points = series
            .iter()
            .find(|s| s.node == card.info.node && s.uuid == card.info.uuid)
            .map_or(&[][..], |s| s.points.as_slice());
        // Buckets over the whole range, empty where nothing was read.
        let span = (args.since.num_milliseconds().max(1)) as f64;
        let slots = args.width.max(1);
        let mut values = vec![None; slots];
        let mut sums = vec![(0.0, 0usize); slots];
        for p in points {
            let at = (p.t_ms - (now - args.since).timestamp_millis()) as f64 / span;
            let i = ((at * slots as f64) as usize).min(slots - 1);
            sums[i].0 += p.avg;
            sums[i].1 += 1;
        }
        for (i, (sum, n)) in sums.into_iter().enumerate() {
            if n > 0 {
                values[i] = Some(sum / n as f64);
            }
        }
        let avg = if points.is_empty() {
            "-".to_string()
        } else {
            reading(
                &answer.metric,
                points.iter().map(|p| p.avg).sum::<f64>() / points.len() as f64,
            )
        };
        let max = points
            .iter()
            .map(|p| p.max)
            .fold(None, |m: Option<f64>, v| Some(m.map_or(v, |m| m.max(v))))
            .map_or("-".to_string(), |m| reading(&answer.metric, m));
        table.row(vec![
            cell(format!("GPU {} · {}", card.info.index, card.info.node)),
            cell(sparkline(&values, slots, top)),
            cell(avg).right(),
            cell(max).right(),
        ]);
    }
    text.push_str(&table.render());
    if series.is_empty() {
        text.push_str(&format!("{DIM}no readings in this range yet{DIM:#}\n"));
    }
    output::print(&text);
    Ok(())
}

/// A reading in its metric's unit as people read it: memory in GiB (the API gives bytes),
/// power in watts, the rest in their own units.
fn reading(metric: &str, value: f64) -> String {
    match metric {
        "utilization" => format!("{value:.0}%"),
        "memory" => format!("{} GiB", output::gib(value.max(0.0) as u64)),
        "temperature" => format!("{value:.0} °C"),
        "power" => format!("{value:.0} W"),
        "sm_clock" => format!("{value:.0} MHz"),
        _ => format!("{value:.0}"),
    }
}

pub async fn report(args: ReportArgs) -> Result<()> {
    let client = config::client()?;
    let now = Utc::now();
    let parse = |t: &str| time::parse_when(t, now).map_err(CliError::usage);
    let from = args.from.as_deref().map(parse).transpose()?;
    let to = args.to.as_deref().map(parse).transpose()?;
    let query = ReportQuery {
        from: Some(from.unwrap_or(now - Duration::days(7))),
        to: Some(to.unwrap_or(now)),
        table: None,
    };
    if args.csv {
        print!("{}", client.usage_csv(&query).await?);
        return Ok(());
    }
    let report = client.usage_report(&query).await?;
    if args.common.json {
        output::json(&report);
        return Ok(());
    }
    let mut text = format!(
        "{BOLD}Usage{BOLD:#} from {} to {} ({})\n",
        output::when(report.from),
        output::when(report.to),
        output::zone()
    );
    for (title, rows) in [("USER", &report.users), ("GROUP", &report.groups)] {
        if rows.is_empty() {
            continue;
        }
        let mut table = Table::new(&[
            title,
            "BOOKED GPU-H",
            "USED GPU-H",
            "USED %",
            "IDLE BOOKED H",
            "JOBS",
            "VIOLATIONS",
            "KWH",
        ]);
        for row in rows {
            let share = if row.gpu_hours_booked > 0.0 {
                format!("{:.0}%", 100.0 * row.gpu_hours_used / row.gpu_hours_booked)
            } else {
                "-".into()
            };
            table.row(vec![
                cell(&row.name),
                cell(lanes_types::units::hours(row.gpu_hours_booked)).right(),
                cell(lanes_types::units::hours(row.gpu_hours_used)).right(),
                cell(share).right(),
                cell(lanes_types::units::hours(row.idle_booked_hours)).right(),
                cell(row.jobs.to_string()).right(),
                cell(row.violations.to_string()).right(),
                cell(match (row.cost, row.co2e_kg) {
                    (Some(cost), Some(co2)) => {
                        format!("{:.2} ({cost:.2}, {co2:.1} kg CO2e)", row.energy_kwh)
                    }
                    (Some(cost), None) => format!("{:.2} ({cost:.2})", row.energy_kwh),
                    (None, Some(co2)) => format!("{:.2} ({co2:.1} kg CO2e)", row.energy_kwh),
                    (None, None) => format!("{:.2}", row.energy_kwh),
                })
                .right(),
            ]);
        }
        text.push('\n');
        text.push_str(&table.render());
    }
    if report.users.is_empty() {
        text.push_str("no bookings in this range\n");
    } else if report.per_process {
        text.push_str(
            "\nUsed GPU-hours and kWh split each card between its processes by their SM share, \
             whoever booked it.\n",
        );
    } else {
        text.push_str(
            "\nNo per-process samples in this range: used GPU-hours are card-level figures, \
             charged to each card's holder.\n",
        );
    }
    output::print(&text);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sparkline_scales_to_the_top_and_leaves_gaps_blank() {
        let values = [Some(0.0), Some(50.0), None, Some(100.0)];
        assert_eq!(sparkline(&values, 4, 100.0), "▁▅ █");
        // Narrower than the data: each character is the mean of its share.
        assert_eq!(sparkline(&[Some(0.0), Some(100.0)], 1, 100.0), "▅");
    }

    #[test]
    fn readings_carry_their_unit_and_memory_is_never_raw_bytes() {
        assert_eq!(reading("memory", 12.5 * (1u64 << 30) as f64), "12.5 GiB");
        assert_eq!(reading("utilization", 87.4), "87%");
        assert_eq!(reading("power", 301.2), "301 W");
    }
}
