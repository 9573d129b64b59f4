//! A small reusable SVG time-series chart. The geometry is a pure function, tested here; the
//! component only binds it to signals.

use leptos::prelude::*;

/// Drawing box of every chart, in SVG user units; the SVG scales to its container.
const WIDTH: f64 = 300.0;
const HEIGHT: f64 = 60.0;

/// SVG path data for a series: the line, and the same line closed down to the axis for a fill.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SeriesPath {
    pub line: String,
    pub area: String,
}

/// Maps `(time_ms, value)` points into the chart box: x from `end_ms - window_ms` to `end_ms`,
/// y from 0 (bottom) to `y_max` (top), values clamped into range. A jump in time longer than
/// `gap_ms` starts a new segment, so missing data shows as a gap, not as a slope.
pub fn series_path(
    points: &[(i64, f64)],
    end_ms: i64,
    window_ms: i64,
    y_max: f64,
    gap_ms: i64,
) -> SeriesPath {
    let start_ms = end_ms - window_ms;
    let x = |t: i64| (((t - start_ms) as f64 / window_ms as f64) * WIDTH).clamp(0.0, WIDTH);
    let y = |v: f64| {
        let ratio = if y_max > 0.0 { v / y_max } else { 0.0 };
        HEIGHT - ratio.clamp(0.0, 1.0) * HEIGHT
    };
    let mut path = SeriesPath::default();
    let mut segment: Vec<(f64, f64)> = Vec::new();
    let mut last_t: Option<i64> = None;
    let flush = |segment: &mut Vec<(f64, f64)>, path: &mut SeriesPath| {
        if let (Some(first), Some(last)) = (segment.first(), segment.last()) {
            let coords: Vec<String> = segment
                .iter()
                .map(|(px, py)| format!("{px:.1},{py:.1}"))
                .collect();
            let joined = coords.join(" L");
            path.line.push_str(&format!("M{joined}"));
            path.area.push_str(&format!(
                "M{:.1},{HEIGHT:.1} L{joined} L{:.1},{HEIGHT:.1} Z",
                first.0, last.0
            ));
        }
        segment.clear();
    };
    for &(t, v) in points
        .iter()
        .filter(|(t, _)| *t >= start_ms && *t <= end_ms)
    {
        if last_t.is_some_and(|prev| t - prev > gap_ms) {
            flush(&mut segment, &mut path);
        }
        segment.push((x(t), y(v)));
        last_t = Some(t);
    }
    flush(&mut segment, &mut path);
    path
}

/// The smallest and largest value of `points`; `None` without points.
pub fn range_of(points: &[(i64, f64)]) -> Option<(f64, f64)> {
    points.iter().fold(None, |acc, &(_, v)| match acc {
        None => Some((v, v)),
        Some((lo, hi)) => Some((lo.min(v), hi.max(v))),
    })
}

/// A value as a short number: whole above 10, one decimal below.
fn round(v: f64) -> String {
    if v.abs() >= 10.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.1}")
    }
}

/// A filled line chart of one metric over a sliding window ending at the newest point.
#[component]
pub fn TimeSeriesChart(
    /// `(time_ms, value)` points, oldest first.
    #[prop(into)]
    points: Signal<Vec<(i64, f64)>>,
    /// The value drawn at the top edge.
    #[prop(into)]
    y_max: Signal<f64>,
    window_ms: i64,
    /// Longest step between points still drawn as connected.
    gap_ms: i64,
    /// What the chart shows, for screen readers and the caption.
    label: &'static str,
    /// The current value, as text, shown beside the caption.
    #[prop(into)]
    current: Signal<String>,
    /// CSS class picking the series color.
    #[prop(default = "series-a")]
    class: &'static str,
    /// `data-testid` of the current value.
    #[prop(optional)]
    testid: Option<&'static str>,
    /// How the text alternative writes a value (a short number unless given).
    #[prop(optional)]
    format: Option<fn(f64) -> String>,
) -> impl IntoView {
    let write = format.unwrap_or(round);
    // Drawn in the browser only: the page carries the points once (in its data), not a second
    // time as server-drawn paths (64 cards once made a 6.2 MB page of both).
    let drawn = RwSignal::new(false);
    Effect::new(move |_| drawn.set(true));
    let path = Memo::new(move |_| {
        points.with(|pts| {
            let end = pts.last().map_or(0, |p| p.0);
            series_path(pts, end, window_ms, y_max.get(), gap_ms)
        })
    });
    // The numbers the chart draws, for screen readers: its range over the window and now.
    let described = move || {
        points.with(|pts| {
            let now = current.get();
            match range_of(pts) {
                Some((lo, hi)) => tr!(
                    chart.described,
                    label,
                    minutes = window_ms / 60_000,
                    low = write(lo),
                    high = write(hi),
                    now
                ),
                None => tr!(chart.no_readings, label),
            }
        })
    };
    view! {
        <figure class=format!("chart {class}")>
            <figcaption>
                <span class="chart-label">{label}</span>
                <span class="chart-value" data-testid=testid>{current}</span>
            </figcaption>
            <svg
                viewBox=format!("0 0 {WIDTH} {HEIGHT}")
                preserveAspectRatio="none"
                role="img"
                aria-label=described
            >
                <line class="grid" x1="0" x2=WIDTH y1=HEIGHT / 2.0 y2=HEIGHT / 2.0></line>
                <path class="area" d=move || if drawn.get() { path.with(|p| p.area.clone()) } else { String::new() }></path>
                <path class="line" d=move || if drawn.get() { path.with(|p| p.line.clone()) } else { String::new() }></path>
            </svg>
        </figure>
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_newest_point_sits_at_the_right_edge_and_full_scale_at_the_top() {
        let p = series_path(&[(0, 0.0), (1000, 100.0)], 1000, 1000, 100.0, 5000);
        assert_eq!(p.line, "M0.0,60.0 L300.0,0.0");
        assert_eq!(p.area, "M0.0,60.0 L0.0,60.0 L300.0,0.0 L300.0,60.0 Z");
    }

    #[test]
    fn a_long_silence_splits_the_line_into_segments() {
        let p = series_path(
            &[(0, 50.0), (100, 50.0), (900, 50.0), (1000, 50.0)],
            1000,
            1000,
            100.0,
            300,
        );
        assert_eq!(p.line.matches('M').count(), 2, "{}", p.line);
        assert_eq!(p.area.matches('Z').count(), 2);
    }

    #[test]
    fn values_out_of_range_are_clamped_and_old_points_left_out() {
        let p = series_path(
            &[(-5000, 1.0), (500, 250.0), (1000, -3.0)],
            1000,
            1000,
            100.0,
            5000,
        );
        assert_eq!(p.line, "M150.0,0.0 L300.0,60.0");
    }

    #[test]
    fn no_points_draw_nothing() {
        assert_eq!(series_path(&[], 0, 1000, 1.0, 10), SeriesPath::default());
    }

    #[test]
    fn a_zero_scale_draws_on_the_axis_instead_of_dividing_by_zero() {
        let p = series_path(&[(0, 5.0)], 0, 1000, 0.0, 10);
        assert_eq!(p.line, "M300.0,60.0");
    }
}
