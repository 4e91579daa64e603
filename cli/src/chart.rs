//! The SVG report: per-tenant p95 wait over time, one panel per scheduler, on a shared log scale
//! so the panels compare at a glance.

use std::path::Path;

use plotters::prelude::*;

use crate::sim::{percentile_us, RunResult};
use crate::trace::SEC;

/// Lowest wait drawn, ms (a log axis has no zero): grants with no wait sit on this floor.
const FLOOR_MS: f64 = 0.01;

/// Per row, per bucket: the p95 wait in ms, `None` for buckets without grants.
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

/// Writes the chart to `path`.
pub fn write(path: &Path, scenario_name: &str, runs: &[RunResult]) -> Result<(), String> {
    let series: Vec<Vec<Vec<Option<f64>>>> = runs.iter().map(p95_series).collect();
    let top = series
        .iter()
        .flatten()
        .flatten()
        .flatten()
        .fold(1.0f64, |m, &v| m.max(v))
        * 2.0;
    let bucket_min = runs[0].bucket_ns as f64 / (60 * SEC) as f64;
    let buckets = runs[0].rows[0].waits.len();
    let minutes = (buckets as f64 * bucket_min).max(bucket_min);
    let height = 40 + 300 * runs.len() as u32;
    let root = SVGBackend::new(path, (1100, height)).into_drawing_area();
    let fail = |e: &dyn std::fmt::Display| format!("cannot draw {}: {e}", path.display());
    root.fill(&WHITE).map_err(|e| fail(&e))?;
    let root = root
        .titled(
            &format!("fairq simulate - {scenario_name}: p95 wait per tenant over time"),
            ("sans-serif", 20),
        )
        .map_err(|e| fail(&e))?;
    let panels = root.split_evenly((runs.len(), 1));
    for ((panel, run), rows) in panels.iter().zip(runs).zip(&series) {
        let mut chart = ChartBuilder::on(panel)
            .caption(
                format!("{} - p95 wait (ms, log scale)", run.name),
                ("sans-serif", 16),
            )
            .margin(8)
            .margin_right(24)
            .x_label_area_size(30)
            .y_label_area_size(60)
            .build_cartesian_2d(0f64..minutes, (FLOOR_MS..top).log_scale())
            .map_err(|e| fail(&e))?;
        chart
            .configure_mesh()
            .x_desc("minutes")
            .x_label_formatter(&|v| format!("{v:.0}"))
            .y_desc("p95 wait ms")
            .y_label_formatter(&|v| {
                if *v >= 1.0 {
                    format!("{v:.0}")
                } else {
                    format!("{v}")
                }
            })
            .draw()
            .map_err(|e| fail(&e))?;
        for (i, (row, points)) in run.rows.iter().zip(rows).enumerate() {
            let color = Palette99::pick(i).to_rgba();
            let data: Vec<(f64, f64)> = points
                .iter()
                .enumerate()
                .filter_map(|(b, v)| v.map(|v| ((b as f64 + 0.5) * bucket_min, v)))
                .collect();
            let label = format!("{} (w{})", row.name, row.weight);
            // Markers too: a row with grants in a single bucket (a short flood) has no line.
            chart
                .draw_series(
                    data.iter()
                        .map(|&point| Circle::new(point, 2, color.filled())),
                )
                .map_err(|e| fail(&e))?;
            chart
                .draw_series(LineSeries::new(data, color.stroke_width(2)))
                .map_err(|e| fail(&e))?
                .label(label)
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 16, y)], color.stroke_width(2))
                });
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperRight)
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()
            .map_err(|e| fail(&e))?;
    }
    root.present().map_err(|e| fail(&e))?;
    Ok(())
}
