//! The SVG report: per-tenant p95 wait over time, one panel per scheduler, on a shared log scale
//! so the panels compare at a glance. Each panel's title gives its isolation verdict, and a wide
//! grey line draws the isolation limit per bucket (from the `ideal` reference), so whether a
//! scheduler kept the tenants not bursting within it reads off the chart.
//!
//! Made to be read by everyone and in black and white: the Okabe-Ito palette (distinguishable
//! with the common colour-vision deficiencies), and each tenant row also has its own dash
//! pattern and marker shape, so rows stay apart where their lines overlap (as in the fifo panel,
//! where every tenant waits behind the same queue). The scenario's bursts and floods are shaded
//! and labelled. A log axis has no zero: buckets whose p95 is 0 (no wait) sit on a floor line
//! labelled as such, so they do not read as a dive.
//!
//! The drawing is deterministic: the same runs give the same bytes (`docs/generate.sh` relies on
//! it).

use std::path::Path;

use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use crate::report::{isolation_rows, ISOLATION_FACTOR, ISOLATION_SLACK_MS};
use crate::scenario::{Rate, Scenario};
use crate::sim::{percentile_us, RunResult};
use crate::trace::SEC;

/// The floor, ms: a p95 below it (0: the request found a free slot) is drawn on it.
const FLOOR_MS: f64 = 0.01;

/// Okabe & Ito's colour-blind-safe palette, without its yellow (too light on white).
const PALETTE: [RGBColor; 7] = [
    RGBColor(0x00, 0x72, 0xB2), // blue
    RGBColor(0xE6, 0x9F, 0x00), // orange
    RGBColor(0x00, 0x9E, 0x73), // bluish green
    RGBColor(0xD5, 0x5E, 0x00), // vermillion
    RGBColor(0xCC, 0x79, 0xA7), // reddish purple
    RGBColor(0x56, 0xB4, 0xE9), // sky blue
    RGBColor(0x00, 0x00, 0x00), // black
];

/// SVG stroke-dasharray per palette entry ("" = solid). plotters has no dashed stroke for
/// polylines, so [`dash`] adds the attribute to the finished SVG, keyed by the stroke colour.
/// Black stays solid: the axes are black polylines too.
const DASHES: [&str; 7] = ["", "9 4", "2 3", "12 3 3 3", "5 5", "1 4", ""];

/// Width of the legend column at the right of each panel, px.
const LEGEND_WIDTH: u32 = 190;

/// The isolation limit's line: a wide light grey, under the tenants' lines.
const LIMIT_COLOR: RGBColor = RGBColor(0xBB, 0xBB, 0xBB);

/// Fill opacity of a burst or flood window.
const WINDOW_OPACITY: f64 = 0.09;

/// A shaded window: a tenant group's burst, in minutes.
pub struct Window {
    /// What the label says, e.g. `burster at 10x share`.
    pub label: String,
    /// Start, minutes.
    pub from: f64,
    /// End, minutes.
    pub to: f64,
}

fn rate_text(rate: &Rate) -> String {
    match (rate.per_s > 0.0, rate.share > 0.0) {
        (true, true) => format!("{}/s + {}x share", rate.per_s, rate.share),
        (true, false) => format!("{}/s", rate.per_s),
        (false, true) => format!("{}x share", rate.share),
        (false, false) => "0/s".into(),
    }
}

/// The scenario's bursts, clipped to its duration.
pub fn windows(scenario: &Scenario) -> Vec<Window> {
    let end = scenario.duration_s / 60.0;
    scenario
        .tenants
        .iter()
        .flat_map(|g| {
            g.bursts.iter().map(move |b| Window {
                label: format!("{} at {}", g.name, rate_text(&b.rate)),
                from: b.start_s / 60.0,
                to: (b.start_s + b.duration_s) / 60.0,
            })
        })
        .filter(|w| w.from < end)
        .map(|w| Window {
            to: w.to.min(end),
            ..w
        })
        .collect()
}

/// About how wide `text` is drawn in a sans-serif font of `size` px (to keep labels apart).
fn text_px(text: &str, size: i32) -> i32 {
    text.chars().count() as i32 * size * 11 / 20 + 4
}

/// Per row, per bucket: the p95 wait in ms (at least [`FLOOR_MS`]), `None` for buckets without
/// grants.
pub fn p95_series(run: &RunResult) -> Vec<Vec<Option<f64>>> {
    run.rows
        .iter()
        .map(|row| {
            row.waits
                .iter()
                .map(|w| {
                    let mut w = w.clone();
                    percentile_us(&mut w, 0.95).map(|us| (f64::from(us) / 1000.0).max(FLOOR_MS))
                })
                .collect()
        })
        .collect()
}

/// Row `i`'s marker outline, in pixels around its centre, `dx` pixels to the right: a
/// circle (octagon), triangle, square, plus, diamond, or downward triangle.
fn shape(i: usize, dx: i32) -> Vec<(i32, i32)> {
    let points: &[(i32, i32)] = match i % 6 {
        0 => &[
            (4, -2),
            (4, 2),
            (2, 4),
            (-2, 4),
            (-4, 2),
            (-4, -2),
            (-2, -4),
            (2, -4),
        ],
        1 => &[(0, -5), (4, 3), (-4, 3)],
        2 => &[(-3, -3), (3, -3), (3, 3), (-3, 3)],
        3 => &[
            (-1, -4),
            (1, -4),
            (1, -1),
            (4, -1),
            (4, 1),
            (1, 1),
            (1, 4),
            (-1, 4),
            (-1, 1),
            (-4, 1),
            (-4, -1),
            (-1, -1),
        ],
        4 => &[(0, -5), (5, 0), (0, 5), (-5, 0)],
        _ => &[(0, 5), (4, -3), (-4, -3)],
    };
    points.iter().map(|&(x, y)| (x + dx, y)).collect()
}

/// Renders the chart as SVG text.
pub fn render(scenario: &Scenario, runs: &[RunResult]) -> Result<String, String> {
    let series: Vec<Vec<Vec<Option<f64>>>> = runs.iter().map(p95_series).collect();
    let top = series
        .iter()
        .flatten()
        .flatten()
        .flatten()
        .fold(1.0f64, |m, &v| m.max(v))
        * 8.0;
    let windows = windows(scenario);
    let bucket_min = runs[0].bucket_ns as f64 / (60 * SEC) as f64;
    let buckets = runs[0].rows[0].waits.len();
    let minutes = (buckets as f64 * bucket_min).max(bucket_min);
    let reference = crate::report::reference(runs);
    let limit = runs
        .iter()
        .zip(&series)
        .find(|(r, _)| reference.is_some_and(|x| std::ptr::eq(x, *r)))
        .map(|(r, p95)| limit_series(r, p95));
    let height = 40 + 300 * runs.len() as u32;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (1100, height)).into_drawing_area();
        let fail = |e: &dyn std::fmt::Display| format!("cannot draw the chart: {e}");
        root.fill(&WHITE).map_err(|e| fail(&e))?;
        let root = root
            .titled(
                &format!(
                    "fairq simulate - {}: p95 wait per tenant over time",
                    scenario.name
                ),
                ("sans-serif", 20),
            )
            .map_err(|e| fail(&e))?;
        let panels = root.split_evenly((runs.len(), 1));
        for ((panel, run), rows) in panels.iter().zip(runs).zip(&series) {
            let (plot, legend) = panel.split_horizontally(1100 - LEGEND_WIDTH);
            let mut chart = ChartBuilder::on(&plot)
                .caption(caption(run, reference), ("sans-serif", 16))
                .margin(8)
                .margin_right(24)
                .x_label_area_size(30)
                .y_label_area_size(60)
                .build_cartesian_2d(0f64..minutes, (FLOOR_MS * 0.6..top).log_scale())
                .map_err(|e| fail(&e))?;
            chart
                .configure_mesh()
                .x_desc("minutes")
                .x_label_formatter(&|v| {
                    if v.fract() == 0.0 {
                        format!("{v:.0}")
                    } else {
                        format!("{v:.1}")
                    }
                })
                .y_desc("p95 wait ms (log scale)")
                .y_label_formatter(&|v| {
                    if *v >= 1.0 {
                        format!("{v:.0}")
                    } else {
                        format!("{v}")
                    }
                })
                .draw()
                .map_err(|e| fail(&e))?;

            // Bursts and floods: shaded behind the lines, labelled over them (below).
            for w in &windows {
                chart
                    .draw_series(std::iter::once(Rectangle::new(
                        [(w.from, FLOOR_MS * 0.6), (w.to, top)],
                        BLACK.mix(WINDOW_OPACITY).filled(),
                    )))
                    .map_err(|e| fail(&e))?;
            }
            // The floor: where p95 = 0 is drawn.
            chart
                .draw_series(std::iter::once(PathElement::new(
                    vec![(0.0, FLOOR_MS), (minutes, FLOOR_MS)],
                    RGBColor(0x77, 0x77, 0x77).stroke_width(1),
                )))
                .map_err(|e| fail(&e))?;

            // The isolation limit, per bucket: what a tenant not marked bursting may wait.
            if let Some(limit) = &limit {
                let points: Vec<(f64, f64)> = limit
                    .iter()
                    .enumerate()
                    .filter_map(|(b, v)| v.map(|v| ((b as f64 + 0.5) * bucket_min, v)))
                    .collect();
                chart
                    .draw_series(LineSeries::new(points, LIMIT_COLOR.stroke_width(5)))
                    .map_err(|e| fail(&e))?;
                legend
                    .draw(
                        &(EmptyElement::at((8, 60 + 22 * run.rows.len() as i32 + 8))
                            + PathElement::new(vec![(0, 0), (30, 0)], LIMIT_COLOR.stroke_width(5))
                            + Text::new(
                                "isolation limit",
                                (38, -7),
                                ("sans-serif", 13).into_font(),
                            )
                            + Text::new(
                                format!("{ISOLATION_FACTOR}x ideal + {ISOLATION_SLACK_MS} ms"),
                                (38, 8),
                                ("sans-serif", 11).into_font(),
                            )),
                    )
                    .map_err(|e| fail(&e))?;
            }

            let marks = (buckets / 24).max(1);
            for (i, (row, points)) in run.rows.iter().zip(rows).enumerate() {
                let color = PALETTE[i % PALETTE.len()];
                let data: Vec<(usize, (f64, f64))> = points
                    .iter()
                    .enumerate()
                    .filter_map(|(b, v)| v.map(|v| (b, ((b as f64 + 0.5) * bucket_min, v))))
                    .collect();
                // A marker every `marks` buckets, each row offset from the others so that rows
                // drawn on top of each other still show theirs; and on isolated points (a short
                // flood), which have no line.
                let has = |b: usize| points.get(b).is_some_and(|v| v.is_some());
                let offset = i * marks / run.rows.len().max(1);
                let marked: Vec<(f64, f64)> = data
                    .iter()
                    .filter(|(b, _)| {
                        b % marks == offset || (!has(b.wrapping_sub(1)) && !has(b + 1))
                    })
                    .map(|&(_, p)| p)
                    .collect();
                chart
                    .draw_series(
                        marked.into_iter().map(|p| {
                            EmptyElement::at(p) + Polygon::new(shape(i, 0), color.filled())
                        }),
                    )
                    .map_err(|e| fail(&e))?;
                chart
                    .draw_series(LineSeries::new(
                        data.into_iter().map(|(_, p)| p),
                        color.stroke_width(2),
                    ))
                    .map_err(|e| fail(&e))?;
                // The legend, in its own column: the row's line (dashed by `dash`) and marker.
                let y = 60 + 22 * i as i32;
                legend
                    .draw(
                        &(EmptyElement::at((8, y))
                            + PathElement::new(vec![(0, 0), (30, 0)], color.stroke_width(2))
                            + Polygon::new(shape(i, 15), color.filled())
                            + Text::new(
                                format!("{} (w{})", row.name, row.weight),
                                (38, -7),
                                ("sans-serif", 13).into_font(),
                            )),
                    )
                    .map_err(|e| fail(&e))?;
            }
            // Labels last, with no backing: the gridlines stay visible behind them.
            let label_style = ("sans-serif", 13)
                .into_font()
                .color(&RGBColor(0x33, 0x33, 0x33));
            // Each label takes the first of four rows where it overlaps no label already placed.
            let px_per_min = f64::from(1100 - LEGEND_WIDTH - 110) / minutes;
            let mut rows_taken: Vec<Vec<(f64, f64)>> = vec![Vec::new(); 4];
            for w in &windows {
                let span = (
                    w.from,
                    w.from + f64::from(text_px(&w.label, 13) + 8) / px_per_min,
                );
                let row = (0..4)
                    .find(|&r| {
                        rows_taken[r]
                            .iter()
                            .all(|&(a, b)| span.1 <= a || b <= span.0)
                    })
                    .unwrap_or(3);
                rows_taken[row].push(span);
                let y = 2 + 16 * row as i32;
                chart
                    .draw_series(std::iter::once(
                        EmptyElement::at((w.from, top))
                            + Text::new(w.label.clone(), (3, y), label_style.clone()),
                    ))
                    .map_err(|e| fail(&e))?;
            }
            let floor_label = "p95 = 0 (no wait) is drawn on this line";
            chart
                .draw_series(std::iter::once(
                    EmptyElement::at((minutes, FLOOR_MS))
                        + Text::new(
                            floor_label.to_string(),
                            (-4, -3),
                            ("sans-serif", 12)
                                .into_font()
                                .color(&RGBColor(0x55, 0x55, 0x55))
                                .pos(Pos::new(HPos::Right, VPos::Bottom)),
                        ),
                ))
                .map_err(|e| fail(&e))?;
        }
        root.present().map_err(|e| fail(&e))?;
    }
    Ok(dash(&svg))
}

/// Adds each palette colour's dash pattern to the polylines stroked in it.
fn dash(svg: &str) -> String {
    let mut out = String::with_capacity(svg.len() + 4096);
    for line in svg.split_inclusive('\n') {
        let pattern = line
            .starts_with("<polyline")
            .then(|| {
                PALETTE.iter().zip(DASHES).find(|(c, d)| {
                    !d.is_empty()
                        && line.contains(&format!("stroke=\"#{:02X}{:02X}{:02X}\"", c.0, c.1, c.2))
                })
            })
            .flatten();
        match pattern {
            Some((_, d)) => {
                out.push_str(&line.replacen(
                    "<polyline ",
                    &format!("<polyline stroke-dasharray=\"{d}\" "),
                    1,
                ));
            }
            None => out.push_str(line),
        }
    }
    out
}

/// Writes the chart to `path`.
pub fn write(path: &Path, scenario: &Scenario, runs: &[RunResult]) -> Result<(), String> {
    let svg = render(scenario, runs)?;
    std::fs::write(path, svg)
        .map_err(|e| format!("cannot write the chart to {}: {e}", path.display()))
}

/// A panel's title: the scheduler and its isolation verdict (the reference says what it is).
fn caption(run: &RunResult, reference: Option<&RunResult>) -> String {
    let name = run.name;
    if name == crate::sched::REFERENCE {
        return format!("{name} (reference: tenants marked bursting served last) - p95 wait, ms");
    }
    let verdict = reference
        .and_then(|r| isolation_rows(run, r))
        .and_then(|rows| {
            rows.into_iter()
                .max_by(|a, b| (a.1 / a.3).total_cmp(&(b.1 / b.3)))
        })
        .map(|(tenant, p95, _, limit)| {
            let (how, word) = if p95 > limit {
                ("NOT isolated", "worst")
            } else {
                ("isolated", "closest")
            };
            let ms = |v: f64| {
                if v >= 100.0 {
                    format!("{v:.0}")
                } else {
                    format!("{v:.2}")
                }
            };
            format!(
                ": {how} ({word}: {tenant} p95 {} ms, limit {} ms over the run)",
                ms(p95),
                ms(limit)
            )
        })
        .unwrap_or_default();
    format!("{name} - p95 wait, ms{verdict}")
}

/// Per bucket, the isolation limit drawn in each panel: `ISOLATION_FACTOR` x the highest p95
/// wait under the reference among the tenants not marked bursting, + `ISOLATION_SLACK_MS`.
/// The verdict itself is judged on each tenant's p95 over the whole run.
fn limit_series(reference: &RunResult, p95: &[Vec<Option<f64>>]) -> Vec<Option<f64>> {
    let buckets = p95.first().map_or(0, Vec::len);
    (0..buckets)
        .map(|b| {
            reference
                .rows
                .iter()
                .zip(p95)
                .filter(|(row, _)| !row.bursting)
                .filter_map(|(_, series)| series[b])
                .reduce(f64::max)
                .map(|v| ISOLATION_FACTOR * v + ISOLATION_SLACK_MS)
        })
        .collect()
}
