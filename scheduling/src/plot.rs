//! The simulator's picture: utilization over time, one line per replay, as a standalone SVG.

use super::scheduler::Time;

/// One line: its label and busy cards at each change.
pub struct Line<'a> {
    pub label: String,
    pub busy: &'a [(Time, u32)],
}

const WIDTH: f64 = 900.0;
const HEIGHT: f64 = 360.0;
const LEFT: f64 = 56.0;
const RIGHT: f64 = 160.0;
const TOP: f64 = 28.0;
const BOTTOM: f64 = 40.0;
const COLORS: [&str; 6] = [
    "#d62728", "#1f77b4", "#2ca02c", "#9467bd", "#ff7f0e", "#7f7f7f",
];

/// Mean busy fraction of `gpus` cards in each of `buckets` equal spans of `[from, to)`.
pub fn utilization(
    busy: &[(Time, u32)],
    gpus: u32,
    from: Time,
    to: Time,
    buckets: usize,
) -> Vec<f64> {
    let width = ((to - from) as f64 / buckets as f64).max(1.0);
    let mut area = vec![0f64; buckets];
    for (i, &(t, n)) in busy.iter().enumerate() {
        let (a, end) = (
            (t.max(from) - from) as f64,
            (busy.get(i + 1).map_or(to, |&(t, _)| t).min(to) - from) as f64,
        );
        if n == 0 || end <= a {
            continue;
        }
        // Walk the buckets by index, so rounding can never stall the walk.
        let first = (a / width).floor() as usize;
        for (b, bucket) in area.iter_mut().enumerate().skip(first) {
            let (lo, hi) = (b as f64 * width, (b + 1) as f64 * width);
            if lo >= end {
                break;
            }
            *bucket += f64::from(n) * (hi.min(end) - lo.max(a)).max(0.0);
        }
    }
    area.iter()
        .map(|a| a / (width * f64::from(gpus.max(1))))
        .collect()
}

/// An SVG of utilization over time for each line, on one time axis.
pub fn svg(title: &str, gpus: u32, lines: &[Line]) -> String {
    let from = lines
        .iter()
        .filter_map(|l| l.busy.first().map(|b| b.0))
        .min()
        .unwrap_or(0);
    let to = lines
        .iter()
        .filter_map(|l| l.busy.last().map(|b| b.0))
        .max()
        .unwrap_or(from + 1)
        .max(from + 1);
    let buckets = 300;
    let plot_w = WIDTH - LEFT - RIGHT;
    let plot_h = HEIGHT - TOP - BOTTOM;
    let x = |i: f64| LEFT + plot_w * i / buckets as f64;
    let y = |u: f64| TOP + plot_h * (1.0 - u.clamp(0.0, 1.0));
    let mut out = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{WIDTH}\" height=\"{HEIGHT}\" \
         font-family=\"sans-serif\" font-size=\"12\">\n\
         <rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n\
         <text x=\"{LEFT}\" y=\"18\" font-size=\"14\">{}</text>\n",
        escape(title)
    );
    for tick in 0..=4 {
        let u = tick as f64 / 4.0;
        out.push_str(&format!(
            "<line x1=\"{LEFT}\" x2=\"{:.1}\" y1=\"{:.1}\" y2=\"{:.1}\" stroke=\"#ddd\"/>\
             <text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{}%</text>\n",
            LEFT + plot_w,
            y(u),
            y(u),
            LEFT - 6.0,
            y(u) + 4.0,
            (u * 100.0) as u32
        ));
    }
    let days = (to - from) as f64 / 86_400.0;
    for tick in 0..=5 {
        let f = tick as f64 / 5.0;
        out.push_str(&format!(
            "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{:.1} d</text>\n",
            LEFT + plot_w * f,
            HEIGHT - BOTTOM + 18.0,
            days * f
        ));
    }
    for (i, line) in lines.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        // Each line stops where its replay ended.
        let own_end = line.busy.last().map_or(to, |b| b.0);
        let bucket_width = (to - from) as f64 / buckets as f64;
        let points: Vec<String> = utilization(line.busy, gpus, from, to, buckets)
            .iter()
            .enumerate()
            .take_while(|(b, _)| from as f64 + *b as f64 * bucket_width < own_end as f64)
            .map(|(b, u)| format!("{:.1},{:.1}", x(b as f64 + 0.5), y(*u)))
            .collect();
        out.push_str(&format!(
            "<polyline fill=\"none\" stroke=\"{color}\" stroke-width=\"1.5\" points=\"{}\"/>\n\
             <rect x=\"{:.1}\" y=\"{:.1}\" width=\"12\" height=\"3\" fill=\"{color}\"/>\
             <text x=\"{:.1}\" y=\"{:.1}\">{}</text>\n",
            points.join(" "),
            WIDTH - RIGHT + 12.0,
            TOP + 14.0 + 18.0 * i as f64,
            WIDTH - RIGHT + 30.0,
            TOP + 19.0 + 18.0 * i as f64,
            escape(&line.label)
        ));
    }
    out.push_str("</svg>\n");
    out
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utilization_averages_busy_cards_over_each_bucket() {
        // 2 of 4 cards busy for the first half, 4 for the second.
        let busy = [(0, 2), (50, 4), (100, 0)];
        assert_eq!(utilization(&busy, 4, 0, 100, 2), vec![0.5, 1.0]);
        assert_eq!(utilization(&busy, 4, 0, 100, 4), vec![0.5, 0.5, 1.0, 1.0]);
        let one = utilization(&busy, 4, 0, 100, 1);
        assert!((one[0] - 0.75).abs() < 1e-12);
        // Spans whose bucket edges do not fall on whole seconds still finish.
        let odd = utilization(&[(0, 3), (1_000_003, 0)], 3, 0, 1_000_003, 7);
        assert!(odd.iter().all(|u| (u - 1.0).abs() < 1e-9), "{odd:?}");
    }

    #[test]
    fn the_svg_has_a_line_and_a_label_per_replay() {
        let a = [(0, 1), (10, 0)];
        let svg = svg(
            "t <1>",
            1,
            &[
                Line {
                    label: "fifo".into(),
                    busy: &a,
                },
                Line {
                    label: "static".into(),
                    busy: &a,
                },
            ],
        );
        assert_eq!(svg.matches("<polyline").count(), 2);
        assert!(svg.contains(">static</text>") && svg.contains("t &lt;1&gt;"));
    }
}
