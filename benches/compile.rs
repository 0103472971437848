//! Compile-stage latency: a bare NVRTC call vs the compile stage (sandboxed worker, cache
//! miss) vs a cache hit. Needs NVRTC (the PyPI wheel is enough); prints a note and does
//! nothing without it.
//!
//! `cargo bench --bench compile`

use std::sync::atomic::{AtomicU64, Ordering};

use criterion::{criterion_group, criterion_main, Criterion};

use cudaperf::candidate::Candidate;
use cudaperf::compile::{nvrtc, CompileOptions, Compiler, Isolation};

const SOURCE: &str = include_str!("../fixtures/tasks/vector_add/reference.cu");

fn bench(c: &mut Criterion) {
    let lib = match nvrtc::load() {
        Ok(l) => l,
        Err(e) => {
            eprintln!("compile bench skipped: {e}");
            return;
        }
    };
    let flags = CompileOptions::default().flags(lib.include_dir.as_deref());
    let counter = AtomicU64::new(0);
    let fresh = || format!("// {}\n{SOURCE}", counter.fetch_add(1, Ordering::Relaxed));
    let mut g = c.benchmark_group("compile");
    g.sample_size(20);
    g.bench_function("bare_nvrtc", |b| {
        b.iter(|| nvrtc::compile(&fresh(), "k.cu", &flags, &["vector_add".into()]).map(|o| o.ok))
    });
    let worker = std::env::var_os("CUDAPERF_WORKER")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| {
            std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/release/cudaperf")
        });
    for (name, isolation) in [
        ("stage_sandboxed_miss", Isolation::Sandboxed),
        ("stage_in_process_miss", Isolation::InProcess),
    ] {
        let compiler = Compiler::new(CompileOptions {
            isolation,
            worker: Some(worker.clone()),
            workers: 1,
            ..Default::default()
        })
        .expect("compiler");
        // Start the worker and load NVRTC in it before measuring.
        let _ = compiler.compile(&Candidate::parse(&fresh()).expect("candidate"));
        g.bench_function(name, |b| {
            b.iter(|| {
                compiler
                    .compile(&Candidate::parse(&fresh()).expect("candidate"))
                    .is_compiled()
            })
        });
    }
    let compiler = Compiler::new(CompileOptions {
        isolation: Isolation::InProcess,
        ..Default::default()
    })
    .expect("compiler");
    let cand = Candidate::parse(SOURCE).expect("candidate");
    let _ = compiler.compile(&cand);
    g.bench_function("stage_cache_hit", |b| {
        b.iter(|| compiler.compile(&cand).is_compiled())
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
