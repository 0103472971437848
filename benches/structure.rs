//! The structure stage against its floor, a bare tree-sitter parse, for every fixture kernel
//! (`fixtures/kernels/*.cu`), in one criterion run.
//!
//! Run: `cargo bench --bench structure -- --warm-up-time 1 --measurement-time 3`.
//! Groups:
//! * `parse_only`: tree-sitter-cuda parsing the source (the floor; the pipeline parses each
//!   submission once, in the syntax stage, and shares the tree).
//! * `structure_stage`: what the structure stage adds on the shared tree — features, the
//!   structural score and the report's JSON (`analysis::analyze_tree` +
//!   `pipeline::structure_stage_from`). Target (DESIGN.md §8): ≤ 1.3 × `parse_only`.
//! * `parse_and_structure`: both, i.e. `SourceTree::parse` + the stage.

use std::hint::black_box;
use std::path::PathBuf;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use cudaperf::analysis::{analyze_tree, SourceTree};
use cudaperf::pipeline::structure_stage_from;

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

fn name(n: &str, src: &[u8]) -> String {
    let lines = src.iter().filter(|b| **b == b'\n').count();
    format!("{n} ({lines} lines)")
}

fn bench_structure(c: &mut Criterion) {
    let kernels = fixtures();
    let mut parser = tree_sitter::Parser::new();
    if parser
        .set_language(&tree_sitter_cuda::LANGUAGE.into())
        .is_err()
    {
        return;
    }
    let mut group = c.benchmark_group("parse_only");
    for (n, src) in &kernels {
        group.throughput(Throughput::Bytes(src.len() as u64));
        group.bench_function(name(n, src), |b| {
            b.iter(|| parser.parse(black_box(src), None))
        });
    }
    group.finish();

    let mut group = c.benchmark_group("structure_stage");
    for (n, src) in &kernels {
        let tree = SourceTree::parse(src).expect("parses");
        group.throughput(Throughput::Bytes(src.len() as u64));
        group.bench_function(name(n, src), |b| {
            b.iter(|| {
                let f = analyze_tree(black_box(&tree));
                structure_stage_from(&f, Vec::new(), &[])
            })
        });
    }
    group.finish();

    let mut group = c.benchmark_group("parse_and_structure");
    for (n, src) in &kernels {
        group.throughput(Throughput::Bytes(src.len() as u64));
        group.bench_function(name(n, src), |b| {
            b.iter(|| {
                let tree = SourceTree::parse(black_box(src)).expect("parses");
                let f = analyze_tree(&tree);
                structure_stage_from(&f, Vec::new(), &[])
            })
        });
    }
    group.finish();
}

criterion_group!(benches, bench_structure);
criterion_main!(benches);
