//! The report's charts, drawn with plotters' SVG backend and checked by the output layer ([`Svg::new`]) before
//! they go into a page: tokens/s by num_gpu per endpoint, the times to each crash, and a cell's timeline.
//!
//! Every label comes from data (endpoint, model and prompt names, log event kinds), so it is made printable and
//! shortened before plotters draws it; plotters escapes the markup characters of text and attributes. A chart
//! whose markup the check refuses is left out, and the caller shows its fallback table instead.

use plotters::coord::ranged1d::SegmentValue;
use plotters::prelude::*;

use crate::output::escape::printable;
use crate::output::text::shorten_middle;
use crate::output::Svg;
use crate::run_analysis::stats;

/// Okabe–Ito colours: told apart with the common colour-vision deficiencies.
const PALETTE: [RGBColor; 7] = [
    RGBColor(0, 114, 178),
    RGBColor(230, 159, 0),
    RGBColor(0, 158, 115),
    RGBColor(204, 121, 167),
    RGBColor(86, 180, 233),
    RGBColor(213, 94, 0),
    RGBColor(0, 0, 0),
];
const CRASH: RGBColor = RGBColor(200, 30, 30);
const FONT: &str = "sans-serif";

/// A label drawn from data: printable (no control characters, no newline) and at most `max` columns.
fn label(s: &str, max: usize) -> String {
    shorten_middle(&printable(s), max)
}

/// Why a chart could not be drawn: plotters failed, or its markup did not pass the SVG check.
#[derive(Debug, thiserror::Error)]
#[error("chart not drawn: {0}")]
pub struct ChartError(String);

fn drawn<E: std::fmt::Debug>(e: E) -> ChartError {
    ChartError(format!("{e:?}"))
}

fn checked(markup: String) -> Result<Svg, ChartError> {
    Svg::new(markup).map_err(|e| ChartError(e.to_string()))
}

/// A num_gpu value as an axis label: -1 lets the runtime decide.
fn num_gpu_label(n: i64) -> String {
    if n < 0 {
        format!("{n} (auto)")
    } else {
        n.to_string()
    }
}

/// The x axis order of num_gpu values: ascending, with the runtime's own choice (-1) last.
pub fn num_gpu_order(values: &mut Vec<i64>) {
    values.sort_by_key(|n| (*n < 0, *n));
    values.dedup();
}

/// One line of the throughput chart: an endpoint's median rate at each num_gpu it ran with success.
#[derive(Clone, Debug, PartialEq)]
pub struct Series {
    pub name: String,
    pub points: Vec<(i64, f64)>,
}

/// Median tokens/s against num_gpu, one line per endpoint.
pub fn rate_by_num_gpu(title: &str, y_desc: &str, series: &[Series]) -> Result<Svg, ChartError> {
    let mut xs: Vec<i64> = series.iter().flat_map(|s| s.points.iter().map(|(x, _)| *x)).collect();
    num_gpu_order(&mut xs);
    let y_max = series.iter().flat_map(|s| s.points.iter().map(|(_, y)| *y)).fold(0.0f64, f64::max);
    if xs.is_empty() || y_max.is_nan() || y_max <= 0.0 {
        return Err(ChartError("no values to plot".into()));
    }
    let at = |x: i64| xs.iter().position(|v| *v == x).unwrap_or(0) as i32;
    let mut markup = String::new();
    {
        let root = SVGBackend::with_string(&mut markup, (760, 380)).into_drawing_area();
        root.fill(&WHITE).map_err(drawn)?;
        let mut chart = ChartBuilder::on(&root)
            .caption(label(title, 90), (FONT, 17))
            .margin(14)
            .x_label_area_size(40)
            .y_label_area_size(56)
            // Integer ranges are inclusive in plotters: 0..=n-1 is one segment per num_gpu value (0..n drew an empty
            // segment, with a tick, past the last value).
            .build_cartesian_2d((0..xs.len() as i32 - 1).into_segmented(), 0.0..y_max * 1.15)
            .map_err(drawn)?;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_desc("num_gpu (layers offloaded)")
            .y_desc(label(y_desc, 40))
            .x_labels(xs.len())
            .x_label_formatter(&|v| match v {
                SegmentValue::CenterOf(i) => xs.get(*i as usize).map(|n| num_gpu_label(*n)).unwrap_or_default(),
                _ => String::new(),
            })
            .label_style((FONT, 13))
            .draw()
            .map_err(drawn)?;
        for (k, s) in series.iter().enumerate() {
            let color = PALETTE[k % PALETTE.len()];
            let mut pts: Vec<(i32, f64)> = s.points.iter().map(|(x, y)| (at(*x), *y)).collect();
            pts.sort_by_key(|(x, _)| *x);
            let centred: Vec<(SegmentValue<i32>, f64)> =
                pts.iter().map(|(x, y)| (SegmentValue::CenterOf(*x), *y)).collect();
            chart
                .draw_series(LineSeries::new(centred.clone(), color.stroke_width(2)))
                .map_err(drawn)?
                .label(label(&s.name, 48))
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(2)));
            chart.draw_series(centred.into_iter().map(|p| Circle::new(p, 4, color.filled()))).map_err(drawn)?;
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperRight)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK.mix(0.4))
            .label_font((FONT, 13))
            .draw()
            .map_err(drawn)?;
        root.present().map_err(drawn)?;
    }
    checked(markup)
}

/// One row of the crash-time chart: a group's failures of one kind.
#[derive(Clone, Debug, PartialEq)]
pub struct CrashRow {
    pub name: String,
    /// Times to the failure, seconds.
    pub times_s: Vec<f64>,
}

/// Time to each crash, one row per group and kind of failure: a dot per crash, the mean ± sd as a bar.
pub fn crash_times(rows: &[CrashRow]) -> Result<Svg, ChartError> {
    let x_max = rows.iter().flat_map(|r| r.times_s.iter().copied()).fold(0.0f64, f64::max);
    if rows.is_empty() || x_max.is_nan() || x_max <= 0.0 {
        return Err(ChartError("no times to plot".into()));
    }
    let names: Vec<String> = rows.iter().map(|r| label(&r.name, 44)).collect();
    let label_width = names.iter().map(|n| n.chars().count()).max().unwrap_or(8) as u32 * 7 + 16;
    let height = 150 + 34 * rows.len() as u32;
    let mut markup = String::new();
    {
        let root = SVGBackend::with_string(&mut markup, (820, height)).into_drawing_area();
        root.fill(&WHITE).map_err(drawn)?;
        let mut chart = ChartBuilder::on(&root)
            .caption("time to failure of each failed request", (FONT, 17))
            .margin(14)
            .x_label_area_size(40)
            .y_label_area_size(label_width.min(340))
            .build_cartesian_2d(0.0..x_max * 1.1, (0..rows.len() as i32).into_segmented())
            .map_err(drawn)?;
        chart
            .configure_mesh()
            .disable_y_mesh()
            .x_desc("seconds from the request (or the server start) to the failure")
            .y_labels(rows.len() + 1)
            .y_label_formatter(&|v| match v {
                SegmentValue::CenterOf(i) if (*i as usize) < names.len() => {
                    names.get(names.len() - 1 - *i as usize).cloned().unwrap_or_default()
                }
                _ => String::new(),
            })
            .label_style((FONT, 13))
            .draw()
            .map_err(drawn)?;
        for (i, r) in rows.iter().enumerate() {
            let row = || SegmentValue::CenterOf((rows.len() - 1 - i) as i32);
            let slot = (rows.len() - 1 - i) as i32;
            if let (Some(m), Some(sd)) = (stats::mean(&r.times_s), stats::sample_sd(&r.times_s)) {
                let bar = BLACK.mix(0.55).stroke_width(2);
                chart
                    .draw_series(std::iter::once(PathElement::new(
                        vec![((m - sd).max(0.0), row()), (m + sd, row())],
                        bar,
                    )))
                    .map_err(drawn)?;
                chart
                    .draw_series(std::iter::once(Rectangle::new(
                        [
                            (m - x_max * 0.002, SegmentValue::Exact(slot)),
                            (m + x_max * 0.002, SegmentValue::Exact(slot + 1)),
                        ],
                        BLACK.mix(0.55).filled(),
                    )))
                    .map_err(drawn)?;
            }
            chart
                .draw_series(r.times_s.iter().map(|t| Circle::new((*t, row()), 5, CRASH.mix(0.8).filled())))
                .map_err(drawn)?;
        }
        root.present().map_err(drawn)?;
    }
    checked(markup)
}

/// One event of a cell's timeline.
#[derive(Clone, Debug, PartialEq)]
pub struct Mark {
    pub t: f64,
    pub kind: String,
    /// A crash, an error or the end of the process: drawn in red.
    pub alarm: bool,
}

/// A cell's timeline: each event a dot at its time, one lane per kind of event (in order of first appearance).
pub fn timeline(title: &str, marks: &[Mark]) -> Result<Svg, ChartError> {
    let mut lanes: Vec<String> = Vec::new();
    for m in marks {
        if !lanes.contains(&m.kind) {
            lanes.push(m.kind.clone());
        }
    }
    if lanes.is_empty() {
        return Err(ChartError("no timed events".into()));
    }
    let t_max = marks.iter().map(|m| m.t).fold(0.0f64, f64::max).max(0.001);
    let names: Vec<String> = lanes.iter().map(|l| label(l, 28)).collect();
    let label_width = names.iter().map(|n| n.chars().count()).max().unwrap_or(8) as u32 * 7 + 16;
    let height = 84 + 22 * lanes.len() as u32;
    let mut markup = String::new();
    {
        let root = SVGBackend::with_string(&mut markup, (820, height)).into_drawing_area();
        root.fill(&WHITE).map_err(drawn)?;
        let mut chart = ChartBuilder::on(&root)
            .caption(label(title, 100), (FONT, 15))
            .margin(12)
            .x_label_area_size(36)
            .y_label_area_size(label_width.min(260))
            .build_cartesian_2d(0.0..t_max * 1.05, (0..lanes.len() as i32).into_segmented())
            .map_err(drawn)?;
        chart
            .configure_mesh()
            .disable_y_mesh()
            .x_desc("seconds from the first timestamp")
            .y_labels(lanes.len() + 1)
            .y_label_formatter(&|v| match v {
                SegmentValue::CenterOf(i) if (*i as usize) < names.len() => {
                    names.get(names.len() - 1 - *i as usize).cloned().unwrap_or_default()
                }
                _ => String::new(),
            })
            .label_style((FONT, 12))
            .draw()
            .map_err(drawn)?;
        let lane = |kind: &str| {
            SegmentValue::CenterOf((lanes.len() - 1 - lanes.iter().position(|l| l == kind).unwrap_or(0)) as i32)
        };
        chart
            .draw_series(marks.iter().map(|m| {
                let color = if m.alarm { CRASH.filled() } else { PALETTE[0].mix(0.75).filled() };
                Circle::new((m.t, lane(&m.kind)), if m.alarm { 6 } else { 4 }, color)
            }))
            .map_err(drawn)?;
        root.present().map_err(drawn)?;
    }
    checked(markup)
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOSTILE: &str = "</text><script>alert(1)</script> a|b\nnext \u{1b}[31mred\u{1b}]0;t\u{7}";

    #[test]
    fn charts_pass_the_svg_check_and_keep_hostile_labels_inert() {
        let svg = rate_by_num_gpu(
            "decode t/s",
            "decode t/s",
            &[
                Series { name: HOSTILE.into(), points: vec![(0, 10.0), (1, 12.0), (-1, 30.0)] },
                Series { name: "cpu".into(), points: vec![(0, 10.0), (1, 10.5), (-1, 10.2)] },
            ],
        )
        .unwrap();
        let crash = crash_times(&[CrashRow { name: HOSTILE.into(), times_s: vec![2.6, 2.65, 2.7] }]).unwrap();
        let line = timeline(
            HOSTILE,
            &[Mark { t: 0.0, kind: HOSTILE.into(), alarm: false }, Mark { t: 2.6, kind: "crash".into(), alarm: true }],
        )
        .unwrap();
        for s in [&svg, &crash, &line] {
            let m = s.markup();
            assert!(m.trim_start().starts_with("<svg"), "{m}");
            assert!(!m.contains("<script") && !m.contains('\u{1b}') && !m.contains('\u{7}'), "{m}");
            assert!(m.contains("&lt;/text&gt;&lt;script"), "the label is drawn as text: {m}");
            assert_eq!(m.matches("<text").count(), m.matches("</text>").count(), "{m}");
        }
        // The axis is in sweep order, the runtime's own choice last, and every num_gpu value is labelled.
        assert!(
            svg.markup().contains(">\n-1 (auto)\n</text>") || svg.markup().contains(">-1 (auto)"),
            "{}",
            svg.markup()
        );
        let mut order = vec![-1, 2, 0, 1, 0];
        num_gpu_order(&mut order);
        assert_eq!(order, [0, 1, 2, -1]);
    }

    #[test]
    fn nothing_to_plot_is_an_error_not_an_empty_chart() {
        assert!(rate_by_num_gpu("t", "y", &[]).is_err());
        assert!(crash_times(&[]).is_err());
        assert!(timeline("t", &[]).is_err());
    }

    /// The x of each tick mark below the x axis of a rate chart: plotters draws each as a 5-pixel vertical
    /// `<polyline points="X,Y X,Y+5 "/>` from the axis line (the horizontal polyline spanning the plot).
    fn x_ticks(markup: &str) -> (Vec<f64>, (f64, f64)) {
        let points: Vec<Vec<(f64, f64)>> = markup
            .split("<polyline ")
            .skip(1)
            .filter_map(|p| {
                let pts = p.split("points=\"").nth(1)?.split('"').next()?;
                Some(
                    pts.split_whitespace()
                        .filter_map(|xy| {
                            let (x, y) = xy.split_once(',')?;
                            Some((x.parse().ok()?, y.parse().ok()?))
                        })
                        .collect(),
                )
            })
            .collect();
        // The axis: the lowest horizontal black line spanning most of the chart.
        let axis = points
            .iter()
            .filter(|p| p.len() == 2 && p[0].1 == p[1].1 && p[1].0 - p[0].0 > 300.0)
            .max_by(|a, b| a[0].1.total_cmp(&b[0].1))
            .expect("an x axis line");
        let (y, span) = (axis[0].1, (axis[0].0, axis[1].0));
        let ticks = points
            .iter()
            .filter(|p| p.len() == 2 && p[0].0 == p[1].0 && p[0].1 == y && p[1].1 > y)
            .map(|p| p[0].0)
            .collect();
        (ticks, span)
    }

    #[test]
    fn the_num_gpu_axis_has_one_tick_per_value_and_none_past_the_last() {
        for xs in [vec![0], vec![0, 1], vec![0, 1, 2, -1], (0..10).collect::<Vec<i64>>()] {
            let points: Vec<(i64, f64)> = xs.iter().map(|x| (*x, 10.0 + *x as f64)).collect();
            let svg = rate_by_num_gpu("t", "y", &[Series { name: "a".into(), points }]).unwrap();
            let m = svg.markup();
            let (ticks, (left, right)) = x_ticks(m);
            assert_eq!(ticks.len(), xs.len(), "one tick per num_gpu value: {ticks:?}\n{m}");
            // The values sit at the centres of equal slots that fill the axis: the last one half a slot from its end
            // (a single value's one tick stands where plotters puts a one-value range, not centred).
            let slot = (right - left) / xs.len() as f64;
            for (i, x) in ticks.iter().enumerate().filter(|_| xs.len() > 1) {
                let want = left + slot * (i as f64 + 0.5);
                assert!((x - want).abs() <= 2.0, "tick {i} at {x}, want {want}: {ticks:?}");
            }
            let circles: Vec<f64> =
                m.split("<circle cx=\"").skip(1).filter_map(|c| c.split('"').next()?.parse().ok()).collect();
            assert_eq!(circles, ticks, "each point on its tick");
            // Each tick labelled with its num_gpu value, in order: the texts below the axis.
            let labels: Vec<String> = m
                .split("<text ")
                .skip(1)
                .filter(|t| {
                    let y: f64 = t.split("y=\"").nth(1).and_then(|r| r.split('"').next()?.parse().ok()).unwrap_or(0.0);
                    t.contains("text-anchor=\"middle\"") && y > 300.0 && y < 345.0
                })
                .map(|t| t[t.find('>').unwrap() + 1..t.find("</text>").unwrap()].trim().to_string())
                .collect();
            let want: Vec<String> = xs.iter().map(|n| num_gpu_label(*n)).collect();
            assert_eq!(labels, want, "{m}");
        }
    }
}
