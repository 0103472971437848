//! PNG of a training curve (plotters, bitmap backend).
//!
//! No system font is assumed: the crate ships DejaVu Sans Mono (`assets/fonts/`, Bitstream
//! Vera licence, in `LICENSE-DejaVu.txt` beside it) and registers it with plotters as
//! `sans-serif`, so labels render identically on any machine, CI included.

use std::path::Path;
use std::sync::OnceLock;

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::register_font;

use super::error::{RankerError, Result};
use super::train::TrainingHistory;

static FONT: &[u8] = include_bytes!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/assets/fonts/DejaVuSansMono.ttf"
));

/// Registers the shipped font once per process; `false` if it could not be parsed.
fn font_ready() -> bool {
    static READY: OnceLock<bool> = OnceLock::new();
    *READY.get_or_init(|| register_font("sans-serif", FontStyle::Normal, FONT).is_ok())
}

const TRAIN: RGBColor = RGBColor(31, 119, 180);
const VAL: RGBColor = RGBColor(214, 39, 40);
const BEST: RGBColor = RGBColor(120, 120, 120);

/// Writes a 1000×420 PNG of `history` to `png_path`: loss per epoch (left) and pairwise
/// accuracy per epoch (right), training in blue, validation in red, the kept epoch as a grey
/// vertical line.
pub fn plot_history(history: &TrainingHistory, png_path: impl AsRef<Path>) -> Result<()> {
    let path = png_path.as_ref();
    let fail = |message: String| RankerError::Plot {
        path: path.to_path_buf(),
        message,
    };
    if history.epochs.is_empty() {
        return Err(fail("the history has no epochs".into()));
    }
    if !font_ready() {
        return Err(fail("the bundled font could not be loaded".into()));
    }
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        if !dir.is_dir() {
            return Err(fail(format!("directory {} does not exist", dir.display())));
        }
    }
    draw(history, path).map_err(fail)
}

type Series = Vec<(f64, f64)>;

fn draw(history: &TrainingHistory, path: &Path) -> std::result::Result<(), String> {
    let e = |err: &dyn std::fmt::Display| err.to_string();
    let root = BitMapBackend::new(path, (1000, 420)).into_drawing_area();
    root.fill(&WHITE).map_err(|x| e(&x))?;
    let (left, right) = root.split_horizontally(500);
    let epochs = &history.epochs;
    let last = epochs.last().map_or(1, |s| s.epoch).max(2) as f64;
    let finite = |v: f64| v.is_finite().then_some(v);
    let series = |f: &dyn Fn(&super::train::EpochStats) -> Option<f64>| -> Series {
        epochs
            .iter()
            .filter_map(|s| f(s).and_then(finite).map(|v| (s.epoch as f64, v)))
            .collect()
    };
    let train_loss = series(&|s| Some(f64::from(s.train_loss)));
    let val_loss = series(&|s| s.val_loss.map(f64::from));
    let train_acc = series(&|s| Some(s.train_accuracy));
    let val_acc = series(&|s| s.val_accuracy);
    let max_loss = train_loss
        .iter()
        .chain(&val_loss)
        .map(|p| p.1)
        .fold(0.0f64, f64::max)
        .max(1e-3)
        * 1.05;

    let panels = [
        (
            "loss",
            (0.0, max_loss),
            [train_loss, val_loss],
            SeriesLabelPosition::UpperRight,
        ),
        (
            "pairwise accuracy",
            (0.0, 1.0),
            [train_acc, val_acc],
            SeriesLabelPosition::LowerRight,
        ),
    ];
    let best = history.best_epoch as f64;
    for (area, (title, y, [train, val], legend_at)) in [&left, &right].into_iter().zip(panels) {
        let panel = Panel {
            title,
            y,
            train,
            val,
            legend_at,
        };
        draw_panel(area, panel, last, best)?;
    }
    root.present().map_err(|x| e(&x))
}

/// One chart of the plot: its title, y range, the training and validation series, and
/// where the legend goes.
struct Panel {
    title: &'static str,
    y: (f64, f64),
    train: Series,
    val: Series,
    legend_at: SeriesLabelPosition,
}

/// Draws `panel` over epochs 1 to `last`, with the best epoch marked.
fn draw_panel(
    area: &DrawingArea<BitMapBackend<'_>, Shift>,
    panel: Panel,
    last: f64,
    best: f64,
) -> std::result::Result<(), String> {
    let e = |err: &dyn std::fmt::Display| err.to_string();
    let Panel {
        title,
        y: (y0, y1),
        train,
        val,
        legend_at,
    } = panel;
    let mut chart = ChartBuilder::on(area)
        .caption(title, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(52)
        .build_cartesian_2d(1.0..last, y0..y1)
        .map_err(|x| e(&x))?;
    chart
        .configure_mesh()
        .x_desc("epoch")
        .x_label_formatter(&|x| format!("{x:.0}"))
        .y_label_formatter(&|y| format!("{y:.2}"))
        .label_style(("sans-serif", 13))
        .light_line_style(RGBColor(246, 246, 246))
        .draw()
        .map_err(|x| e(&x))?;
    chart
        .draw_series(LineSeries::new([(best, y0), (best, y1)], BEST))
        .map_err(|x| e(&x))?;
    chart
        .draw_series(LineSeries::new(train, TRAIN.stroke_width(2)))
        .map_err(|x| e(&x))?
        .label("train")
        .legend(|(x, y)| PathElement::new([(x, y), (x + 18, y)], TRAIN.stroke_width(2)));
    if !val.is_empty() {
        chart
            .draw_series(LineSeries::new(val, VAL.stroke_width(2)))
            .map_err(|x| e(&x))?
            .label("validation")
            .legend(|(x, y)| PathElement::new([(x, y), (x + 18, y)], VAL.stroke_width(2)));
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .label_font(("sans-serif", 13))
        .position(legend_at)
        .draw()
        .map_err(|x| e(&x))?;
    Ok(())
}
