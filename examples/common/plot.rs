//! PNG curves of a run (plotters; the crate's bundled font, so no system font is needed).

use std::path::Path;

use plotters::prelude::*;
use plotters::style::register_font;

use super::rollout::StepLog;

static FONT: &[u8] = include_bytes!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/assets/fonts/DejaVuSansMono.ttf"
));

/// Eight distinct colours: the replayed ablation draws eight arms.
const COLORS: [RGBColor; 8] = [
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(44, 160, 44),
    RGBColor(148, 103, 189),
    RGBColor(255, 127, 14),
    RGBColor(120, 120, 120),
    RGBColor(23, 190, 207),
    RGBColor(140, 86, 75),
];

/// A named series of (x, y) points.
pub type Series = (String, Vec<(f64, f64)>);

fn panel(
    area: &DrawingArea<BitMapBackend, plotters::coord::Shift>,
    title: &str,
    y_label: &str,
    series: &[Series],
) -> Result<(), String> {
    let pts = series
        .iter()
        .flat_map(|s| s.1.iter())
        .filter(|p| p.1.is_finite());
    let (mut x1, mut y0, mut y1) = (1.0f64, f64::INFINITY, f64::NEG_INFINITY);
    for p in pts {
        x1 = x1.max(p.0);
        y0 = y0.min(p.1);
        y1 = y1.max(p.1);
    }
    if !y0.is_finite() {
        (y0, y1) = (0.0, 1.0);
    }
    let pad = ((y1 - y0) * 0.08).max(1e-3);
    let mut chart = ChartBuilder::on(area)
        .caption(title, ("sans-serif", 18))
        .margin(10)
        .x_label_area_size(30)
        .y_label_area_size(50)
        .build_cartesian_2d(0.0..x1, (y0 - pad)..(y1 + pad))
        .map_err(|e| e.to_string())?;
    chart
        .configure_mesh()
        .x_desc("step")
        .y_desc(y_label)
        .label_style(("sans-serif", 12))
        .draw()
        .map_err(|e| e.to_string())?;
    for (i, (name, pts)) in series.iter().enumerate() {
        let c = COLORS[i % COLORS.len()];
        let pts: Vec<(f64, f64)> = pts.iter().copied().filter(|p| p.1.is_finite()).collect();
        chart
            .draw_series(LineSeries::new(pts, c.stroke_width(2)))
            .map_err(|e| e.to_string())?
            .label(name.clone())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], c.stroke_width(2)));
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .label_font(("sans-serif", 12))
        .draw()
        .map_err(|e| e.to_string())?;
    Ok(())
}

/// Writes `panels` side by side (each a title, a y label and its series) to `path`.
pub fn plot(path: &Path, panels: &[(String, String, Vec<Series>)]) -> Result<(), String> {
    register_font("sans-serif", FontStyle::Normal, FONT)
        .map_err(|_| "the bundled font could not be loaded".to_string())?;
    let w = 480 * panels.len().max(1) as u32;
    let root = BitMapBackend::new(path, (w, 400)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let areas = root.split_evenly((1, panels.len().max(1)));
    for (a, (title, y, series)) in areas.iter().zip(panels) {
        panel(a, title, y, series)?;
    }
    root.present().map_err(|e| e.to_string())
}

/// The curve of one run: rewards, rates, and speedup (GPU) or structure (static).
pub fn plot_run(path: &Path, history: &[StepLog], label: &str) -> Result<(), String> {
    let pts = |f: &dyn Fn(&StepLog) -> Option<f64>| -> Vec<(f64, f64)> {
        history
            .iter()
            .filter_map(|s| f(s).map(|v| (s.step as f64, v)))
            .collect()
    };
    let mut rewards: Vec<Series> = vec![
        ("mean".into(), pts(&|s| Some(s.reward_mean))),
        ("max".into(), pts(&|s| Some(s.reward_max))),
    ];
    let turns = history.first().map_or(0, |s| s.reward_mean_turn.len());
    for t in 0..turns {
        rewards.push((
            format!("turn {}", t + 1),
            pts(&|s| s.reward_mean_turn.get(t).copied()),
        ));
    }
    let mut rates: Vec<Series> = vec![("compiles+launches".into(), pts(&|s| Some(s.compile_rate)))];
    if history.iter().any(|s| s.correct_rate.is_some()) {
        rates.push(("correct".into(), pts(&|s| s.correct_rate)));
    }
    let third = if history.iter().any(|s| s.geomean_speedup.is_some()) {
        (
            "geomean speedup of correct samples".to_string(),
            "speedup".to_string(),
            vec![("geomean".to_string(), pts(&|s| s.geomean_speedup))],
        )
    } else {
        (
            "mean structural score (compiled)".to_string(),
            "score".to_string(),
            vec![("structure".to_string(), pts(&|s| s.structure_mean))],
        )
    };
    plot(
        path,
        &[
            (format!("reward ({label})"), "reward".into(), rewards),
            ("rates".into(), "fraction".into(), rates),
            third,
        ],
    )
}
