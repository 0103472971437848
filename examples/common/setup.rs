//! Finding the fixtures and building the evaluator, the same way here and on a GPU machine
//! that has no Rust toolchain (binaries carried there, fixtures found at run time).

use std::path::{Path, PathBuf};

use cudaperf::pipeline::{EvalOptions, Evaluator};

/// The fixtures folder: `explicit`, else `./fixtures`, else `$CARGO_MANIFEST_DIR/fixtures`
/// (read at run time), else the checkout this binary was built from.
pub fn fixtures_root(explicit: Option<&Path>) -> Result<PathBuf, String> {
    let mut tried = Vec::new();
    let candidates = explicit
        .map(Path::to_path_buf)
        .into_iter()
        .chain(std::iter::once(PathBuf::from("fixtures")))
        .chain(std::env::var_os("CARGO_MANIFEST_DIR").map(|d| PathBuf::from(d).join("fixtures")))
        .chain(std::iter::once(
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures"),
        ));
    for c in candidates {
        if c.join("tasks").is_dir() {
            return Ok(c);
        }
        tried.push(c.display().to_string());
    }
    Err(format!(
        "no fixtures folder (with tasks/) found; tried {}",
        tried.join(", ")
    ))
}

/// An evaluator with the GPU stages on or off, the ranker model from `fixtures`, and the
/// sandbox worker: `CUDAPERF_WORKER`, else `worker` (the test's `cudaperf`), else this
/// executable (examples call [`serve_as_worker_if_asked`] first in `main`).
pub fn evaluator(fixtures: &Path, gpu: bool, worker: Option<PathBuf>) -> Evaluator {
    // The examples are their own sandbox workers, so this cannot fail for want of one.
    let mut o = EvalOptions {
        no_gpu: !gpu,
        ranker_model: Some(fixtures.join("models/ranker")),
        ..EvalOptions::default()
    };
    let worker = std::env::var_os("CUDAPERF_WORKER")
        .map(PathBuf::from)
        .or(worker)
        .or_else(|| std::env::current_exe().ok());
    o.compile.worker = worker.clone();
    o.exec.worker = worker;
    Evaluator::new(o).unwrap_or_else(|e| panic!("cannot build the evaluator: {e}"))
}

/// Serves as a sandbox worker when started as one (`<exe> __cudaperf_worker <role>`), so an
/// example can be its own worker. Call first thing in `main`.
pub fn serve_as_worker_if_asked() {
    cudaperf::worker::run_if_requested();
}

/// Whether a GPU and driver are present.
pub fn gpu_present() -> bool {
    cudaperf::exec::visible_gpus().is_ok()
}
