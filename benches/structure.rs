//! Parse + structural features for every fixture kernel (`fixtures/kernels/*.cu`).
//!
//! Run: `cargo bench --bench structure -- --warm-up-time 1 --measurement-time 3`.
//! Target: at most 100 µs for a 100-line kernel (`layernorm.cu`).

use std::hint::black_box;
use std::path::PathBuf;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use cudaperf::analysis::analyze;

fn fixtures() -> Vec<(String, Vec<u8>)> {
    let root = std::env::var("CARGO_MANIFEST_DIR")
        .unwrap_or_else(|_| env!("CARGO_MANIFEST_DIR").to_string());
    let dir = PathBuf::from(root).join("fixtures").join("kernels");
    let mut out: Vec<(String, Vec<u8>)> = std::fs::read_dir(&dir)
        .map(|rd| {
            rd.filter_map(Result::ok)
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|x| x == "cu"))
                .filter_map(|p| {
                    let name = p.file_stem()?.to_string_lossy().into_owned();
                    Some((name, std::fs::read(&p).ok()?))
                })
                .collect()
        })
        .unwrap_or_default();
    out.sort();
    out
}

fn bench_structure(c: &mut Criterion) {
    let mut group = c.benchmark_group("analyze");
    for (name, src) in fixtures() {
        let lines = src.iter().filter(|b| **b == b'\n').count();
        group.throughput(Throughput::Bytes(src.len() as u64));
        group.bench_function(format!("{name} ({lines} lines)"), |b| {
            b.iter(|| analyze(black_box(&src)))
        });
    }
    group.finish();

    // Baseline: tree-sitter parsing alone, to separate parse cost from feature cost.
    let mut parser = tree_sitter::Parser::new();
    if parser
        .set_language(&tree_sitter_cuda::LANGUAGE.into())
        .is_err()
    {
        return;
    }
    let mut group = c.benchmark_group("parse_only");
    for (name, src) in fixtures() {
        group.bench_function(name, |b| b.iter(|| parser.parse(black_box(&src), None)));
    }
    group.finish();
}

criterion_group!(benches, bench_structure);
criterion_main!(benches);
