//! How results are shown: aligned tables with colour on a terminal (plain when piped, or with
//! `NO_COLOR`), JSON with `--json`, times in the viewer's zone, cards as "GPU 3 · node".

use anstyle::{AnsiColor, Style};
use chrono::{DateTime, Local, Utc};
use lanes_types::booking::GpuRef;
use lanes_types::GpuState;
use std::io::Write;

pub const BOLD: Style = Style::new().bold();
pub const DIM: Style = Style::new().dimmed();
pub const GREEN: Style = AnsiColor::Green.on_default();
pub const YELLOW: Style = AnsiColor::Yellow.on_default();
pub const RED: Style = AnsiColor::Red.on_default().bold();
pub const CYAN: Style = AnsiColor::Cyan.on_default();
pub const PLAIN: Style = Style::new();

/// One cell: its text and how to show it.
#[derive(Clone, Debug)]
pub struct Cell {
    pub text: String,
    pub style: Style,
    /// Numbers line up on the right.
    pub right: bool,
}

pub fn cell(text: impl Into<String>) -> Cell {
    Cell {
        text: text.into(),
        style: PLAIN,
        right: false,
    }
}

impl Cell {
    pub fn styled(mut self, style: Style) -> Self {
        self.style = style;
        self
    }

    pub fn right(mut self) -> Self {
        self.right = true;
        self
    }

    /// Cut to `chars` characters, the last of them "…", so that a table keeps its width.
    pub fn at_most(mut self, chars: usize) -> Self {
        if self.text.chars().count() > chars {
            let kept: String = self.text.chars().take(chars.saturating_sub(1)).collect();
            self.text = kept + "…";
        }
        self
    }
}

/// A table: a heading row and rows, columns padded to their widest cell.
#[derive(Clone, Debug, Default)]
pub struct Table {
    rows: Vec<Vec<Cell>>,
    /// Lines printed under a row (processes under their card), by row index.
    notes: Vec<(usize, String, Style)>,
}

impl Table {
    pub fn new(heading: &[&str]) -> Self {
        Self {
            rows: vec![heading.iter().map(|h| cell(*h).styled(BOLD)).collect()],
            notes: Vec::new(),
        }
    }

    pub fn row(&mut self, cells: Vec<Cell>) {
        self.rows.push(cells);
    }

    /// A line under the last row.
    pub fn note(&mut self, text: String, style: Style) {
        self.notes.push((self.rows.len() - 1, text, style));
    }

    pub fn is_empty(&self) -> bool {
        self.rows.len() <= 1
    }

    pub fn render(&self) -> String {
        let columns = self.rows.iter().map(Vec::len).max().unwrap_or(0);
        let widths: Vec<usize> = (0..columns)
            .map(|c| {
                self.rows
                    .iter()
                    .filter_map(|r| r.get(c))
                    .map(|cell| cell.text.chars().count())
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        let mut out = String::new();
        for (i, row) in self.rows.iter().enumerate() {
            let mut line = String::new();
            for (c, cell) in row.iter().enumerate() {
                let pad = widths[c].saturating_sub(cell.text.chars().count());
                let last = c + 1 == row.len();
                let text = format!("{}{}{:#}", cell.style, cell.text, cell.style);
                if cell.right {
                    line.push_str(&" ".repeat(pad));
                    line.push_str(&text);
                } else {
                    line.push_str(&text);
                    if !last {
                        line.push_str(&" ".repeat(pad));
                    }
                }
                if !last {
                    line.push_str("  ");
                }
            }
            out.push_str(line.trim_end());
            out.push('\n');
            for (_, text, style) in self.notes.iter().filter(|(r, ..)| *r == i) {
                out.push_str(&format!("{style}{text}{style:#}\n"));
            }
        }
        out
    }
}

/// Writes to stdout, stripping colour when it is not a terminal or `NO_COLOR` is set.
pub fn print(text: &str) {
    let mut out = anstream::stdout();
    let _ = out.write_all(text.as_bytes());
    let _ = out.flush();
}

/// A line on stderr (colour stripped alike).
pub fn say(text: &str) {
    let mut err = anstream::stderr();
    let _ = writeln!(err, "{text}");
}

/// A value as pretty JSON on stdout.
pub fn json<T: serde::Serialize>(value: &T) {
    let text = serde_json::to_string_pretty(value).unwrap_or_else(|_| "null".into());
    println!("{text}");
}

/// A moment in the viewer's zone: `14:05` today, `Tue 14:05` within a week, else the date.
pub fn when(t: DateTime<Utc>) -> String {
    when_from(t, Utc::now())
}

pub fn when_from(t: DateTime<Utc>, now: DateTime<Utc>) -> String {
    let local = t.with_timezone(&Local);
    let today = now.with_timezone(&Local).date_naive();
    let days = (local.date_naive() - today).num_days();
    if days == 0 {
        local.format("%H:%M").to_string()
    } else if (-6..=6).contains(&days) {
        local.format("%a %H:%M").to_string()
    } else {
        local.format("%Y-%m-%d %H:%M").to_string()
    }
}

/// The viewer's UTC offset, to name the zone of the times shown.
pub fn zone() -> String {
    Local::now().format("UTC%:z").to_string()
}

/// "GPU 3 · node", by the card's index where the inventory knows it.
pub fn card_name(gpu: &GpuRef, inventory: &[GpuState]) -> String {
    match inventory
        .iter()
        .find(|g| g.info.node == gpu.node && g.info.uuid == gpu.uuid)
    {
        Some(g) => format!("GPU {} · {}", g.info.index, gpu.node),
        None => format!("{} · {}", gpu.uuid, gpu.node),
    }
}

/// Cards of a booking, compactly: "GPU 0,1 · node-a" (several nodes: each).
pub fn cards_name(gpus: &[GpuRef], inventory: &[GpuState]) -> String {
    let mut by_node: std::collections::BTreeMap<&str, Vec<String>> = Default::default();
    for gpu in gpus {
        let label = inventory
            .iter()
            .find(|g| g.info.node == gpu.node && g.info.uuid == gpu.uuid)
            .map(|g| g.info.index.to_string())
            .unwrap_or_else(|| gpu.uuid.clone());
        by_node.entry(&gpu.node).or_default().push(label);
    }
    by_node
        .into_iter()
        .map(|(node, cards)| format!("GPU {} · {node}", cards.join(",")))
        .collect::<Vec<_>>()
        .join("; ")
}

pub fn gib(bytes: u64) -> String {
    format!("{:.1}", bytes as f64 / (1u64 << 30) as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_align_to_the_widest_cell_and_numbers_to_the_right() {
        let mut t = Table::new(&["GPU", "UTIL"]);
        t.row(vec![cell("0"), cell("5%").right()]);
        t.row(vec![cell("10"), cell("100%").right()]);
        let text = t.render();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[1].len(), lines[2].len());
        assert!(lines[1].ends_with("  5%"));
    }

    #[test]
    fn times_today_show_the_clock_and_later_the_day() {
        let now = Utc::now();
        assert_eq!(when_from(now, now).len(), 5);
        assert_eq!(
            when_from(now + chrono::Duration::days(30), now).len(),
            "2026-12-31 14:00".len()
        );
    }
}
