//! The ranker's memory-traffic, reuse and serial-work features on real CUDA sources parsed by
//! the real grammar (the dataset's implementations and the out-of-distribution kernels in
//! `fixtures/ranker_ood`), and what the shipped model makes of textbook slow patterns.

mod common;

use std::collections::HashMap;

use cudaperf::analysis::analyze;
use cudaperf::analysis::FEATURE_NAMES;
use cudaperf::candidate::PlanLimits;
use cudaperf::ranker::{
    features_for, launch_features, traffic_features, traffic_features_named, FeatureSet, TimedPlan,
    TrainedRanker,
};
use cudaperf::task::Task;

fn task(id: &str) -> Task {
    Task::load(common::fixture("tasks").join(id)).expect("task")
}

/// A dataset implementation's source, or an out-of-distribution kernel's (`ood:<file>`).
fn source(task: &Task, name: &str) -> String {
    match name.strip_prefix("ood:") {
        Some(file) => {
            std::fs::read_to_string(common::fixture("ranker_ood").join(file)).expect("ood kernel")
        }
        None if name == "reference" => task.reference.source.clone(),
        None => task
            .implementation(name)
            .expect("implementation")
            .source
            .clone(),
    }
}

/// The traffic features of one implementation of `task_id`, by name.
fn traffic(task_id: &str, name: &str) -> HashMap<&'static str, f32> {
    let task = task(task_id);
    let src = source(&task, name);
    traffic_of(&task, &src, name)
}

/// The traffic features of `src` (with its `@launch` line) in `task`, by name.
fn traffic_of(task: &Task, src: &str, name: &str) -> HashMap<&'static str, f32> {
    let plan = TimedPlan::of_source(task, src, &PlanLimits::default(), name).expect("plan");
    let features = analyze(src.as_bytes());
    traffic_features_named(&plan.input(task, src), &features, name)
        .expect("traffic features")
        .into_iter()
        .collect()
}

// Guards the redundant-read feature: 256 blocks that each sweep the whole input (one block
// per bin) move ~256× the bytes of a privatised histogram, and every block reads the same
// addresses.
#[test]
fn block_per_bin_histogram_rereads_its_input() {
    let slow = traffic("histogram_256", "ood:histogram_256_block_per_bin.cu");
    let fast = traffic("histogram_256", "shared_privatized");
    assert!(
        slow["traffic_redundant_reads"] > 5.0,
        "255 extra passes: ln(1 + 255) ≈ 5.5, got {}",
        slow["traffic_redundant_reads"]
    );
    assert!(slow["traffic_block_invariant_reads"] > 5.0, "{slow:?}");
    assert_eq!(fast["traffic_redundant_reads"], 0.0, "{fast:?}");
    assert!(
        slow["traffic_dram_bytes_per_element"] > fast["traffic_dram_bytes_per_element"] + 3.0,
        "the 16 MiB input fits in L2 only in part: {slow:?} vs {fast:?}"
    );
    assert!(
        slow["traffic_estimated_time_us"] > fast["traffic_estimated_time_us"] + 1.0,
        "{slow:?} vs {fast:?}"
    );
}

// Guards the serial-work features: a Blelloch pass that scans all tile totals in one block
// executes hundreds of barriers on one SM; reduce-then-scan's one-block pass far fewer.
#[test]
fn one_block_blelloch_pass_is_a_long_barrier_chain() {
    let slow = traffic("prefix_sum", "ood:prefix_sum_blelloch_one_block_pass.cu");
    let fast = traffic("prefix_sum", "reduce_then_scan");
    let barriers = |f: &HashMap<&str, f32>| f["traffic_serial_barriers"].exp_m1();
    assert!(
        barriers(&slow) > 300.0,
        "16 chunks × ~22 barriers and the tile tree: {}",
        barriers(&slow)
    );
    assert!(
        barriers(&slow) > 4.0 * barriers(&fast),
        "{slow:?} vs {fast:?}"
    );
}

// Guards the reuse working set: warp-per-row softmax keeps 64 rows in flight per SM for its
// second sweep, block-per-row 8: eight times the bytes that must stay in cache.
#[test]
fn warp_per_row_softmax_keeps_more_rows_in_flight_than_block_per_row() {
    let warp = traffic("softmax_rows", "warp_per_row_shuffle");
    let block = traffic("softmax_rows", "block_per_row_smem");
    assert!(
        warp["traffic_reuse_set_l1"] > block["traffic_reuse_set_l1"] + 1.0,
        "{warp:?} vs {block:?}"
    );
    assert!(
        warp["traffic_reuse_set_l2"] > block["traffic_reuse_set_l2"],
        "{warp:?} vs {block:?}"
    );
}

// Guards barriers per element: the interleaved modulo tree runs 9 barriers per 256
// elements, a grid-stride warp-shuffle reduction a handful per block of many elements.
#[test]
fn interleaved_modulo_tree_pays_barriers_per_element() {
    let slow = traffic("max_reduce", "ood:max_reduce_interleaved_modulo.cu");
    let fast = traffic("max_reduce", "warp_shuffle_grid_stride");
    let per_256 = slow["traffic_barriers_per_element"].exp_m1();
    assert!(
        (8.0..=10.5).contains(&per_256),
        "barriers per 256 elements: {per_256}"
    );
    assert!(
        slow["traffic_barriers_per_element"] > fast["traffic_barriers_per_element"] + 1.5,
        "{slow:?} vs {fast:?}"
    );
}

// Guards the chain feature: a decoupled look-back spins on its predecessors' flags, so its
// blocks form a chain; reduce-then-scan has none.
#[test]
fn decoupled_look_back_is_an_inter_block_chain() {
    let chained = traffic("exclusive_scan_i32", "single_pass_decoupled_lookback");
    let passes = traffic("exclusive_scan_i32", "reduce_then_scan_int4");
    assert!(chained["traffic_chain_blocks"] > 5.0, "{chained:?}");
    assert_eq!(passes["traffic_chain_blocks"], 0.0, "{passes:?}");
}

// Guards the bank-conflict weighting: the unpadded 32×32 tile's column reads hit one bank
// 32 times; the padded tile's none.
#[test]
fn unpadded_transpose_tile_conflicts_and_padded_does_not() {
    let nopad = traffic("transpose", "smem_tiled_nopad");
    let padded = traffic("transpose", "smem_tiled_padded");
    assert!(nopad["traffic_bank_conflict_excess"] > 0.5, "{nopad:?}");
    assert_eq!(padded["traffic_bank_conflict_excess"], 0.0, "{padded:?}");
}

/// Every traffic feature is finite on every implementation of a few varied tasks.
#[test]
fn traffic_features_are_finite_on_real_implementations() {
    for id in [
        "matmul",
        "spmv_csr",
        "histogram_256",
        "conv2d",
        "bfs_frontier_expand_csr",
    ] {
        let t = task(id);
        for imp in t.all_implementations() {
            for (name, v) in traffic(id, &imp.name) {
                assert!(v.is_finite(), "{id}/{}: {name} = {v}", imp.name);
            }
        }
    }
}

// Guards the shared warp probe: the ranker's feature vector runs the detailed probe once per
// launch for both the launch-plan and the traffic groups; on every implementation of every
// task it must equal the two groups computed each on its own (the sector probe included).
#[test]
fn one_shared_probe_gives_the_features_of_two_separate_ones() {
    let set = FeatureSet {
        launch: true,
        traffic: true,
        ngram_buckets: 0,
    };
    let names = set.names();
    let dataset = cudaperf::dataset::Dataset::load(common::fixture("tasks")).expect("dataset");
    let mut checked = 0;
    for (t, imp) in dataset.implementations() {
        let what = format!("{}/{}", t.id, imp.name);
        let Ok(plan) = TimedPlan::of_source(t, &imp.source, &PlanLimits::default(), &what) else {
            continue;
        };
        let input = plan.input(t, &imp.source);
        let features = analyze(imp.source.as_bytes());
        let mut separate = features.to_vector();
        separate.extend(launch_features(&input, &features, &what).expect("launch"));
        separate.extend(traffic_features(&input, &features, &what).expect("traffic"));
        let shared = features_for(&imp.source, Some(&input), &names).expect("features");
        assert_eq!(shared.len(), separate.len(), "{what}");
        assert!(separate.len() > FEATURE_NAMES.len(), "{what}");
        for (i, (a, b)) in shared.iter().zip(&separate).enumerate() {
            assert!(
                a.to_bits() == b.to_bits(),
                "{what}: {} = {a} shared, {b} separate",
                names[i]
            );
        }
        checked += 1;
    }
    assert!(checked > 700, "only {checked} implementations had a plan");
}

/// The probability the model gives `a` being faster than `b` (implementations of `task`).
fn prob_faster(model: &TrainedRanker, task_id: &str, a: &str, b: &str) -> (f32, f32) {
    let t = task(task_id);
    let names = model.base_feature_names().to_vec();
    let features_of = |src: &str, name: &str| {
        let plan = FeatureSet::of(&names)
            .needs_plan()
            .then(|| TimedPlan::of_source(&t, src, &PlanLimits::default(), name).expect("plan"));
        features_for(
            src,
            plan.as_ref().map(|p| p.input(&t, src)).as_ref(),
            &names,
        )
        .expect("features")
    };
    // A reference-context model sees each kernel against the task's reference.
    let reference = features_of(&t.reference.source, "reference");
    let features = |name: &str| {
        let f = features_of(&source(&t, name), name);
        model.input_against(&f, &reference).expect("input")
    };
    let c = model
        .compare(&features(a), &features(b))
        .expect("comparison");
    (c.prob_faster, c.uncertainty)
}

// Guards the requirement: the shipped model never ranks a textbook slow pattern
// above the dataset's fast kernel of the same task just because the pattern is rare in
// training (features clamped to the training range; the traffic features see the cost).
#[test]
fn shipped_model_does_not_reward_textbook_slow_patterns() {
    let model = TrainedRanker::shipped().expect("shipped model");
    for (task_id, slow, fast) in [
        (
            "histogram_256",
            "ood:histogram_256_block_per_bin.cu",
            "shared_privatized",
        ),
        (
            "max_reduce",
            "ood:max_reduce_interleaved_modulo.cu",
            "warp_shuffle_grid_stride",
        ),
        (
            "prefix_sum",
            "ood:prefix_sum_blelloch_one_block_pass.cu",
            "reduce_then_scan",
        ),
    ] {
        let (p, u) = prob_faster(&model, task_id, slow, fast);
        assert!(
            p < 0.5,
            "{task_id}: {slow} predicted faster than {fast} with p = {p} (disagreement {u})"
        );
    }
}

// Guards backward compatibility: the model shipped before ensembles (format version 1, kept
// in fixtures/models/ranker-v1-2026-12-01) still loads, as one member at temperature 1, and
// scores through the same plain forward pass as before (no clamp: it has no saved range).
#[test]
fn version_1_model_still_loads_and_scores_as_before() {
    let dir = common::fixture("models/ranker-v1-2026-12-01");
    let model = TrainedRanker::load_unchecked(&dir).expect("version 1 model");
    assert_eq!(model.ensemble_size(), 1);
    assert_eq!(model.temperature(), 1.0);
    assert!(model.normalizer().min.is_empty());
    let names = model.feature_names().to_vec();
    let t = task("softmax_rows");
    let src = source(&t, "warp_per_row_shuffle");
    let plan = TimedPlan::of_source(&t, &src, &PlanLimits::default(), "v1").expect("plan");
    let x = features_for(&src, Some(&plan.input(&t, &src)), &names).expect("features");
    let by_hand: Vec<f32> = x
        .iter()
        .zip(&model.normalizer().mean)
        .zip(&model.normalizer().std)
        .map(|((v, m), s)| (v - m) / s)
        .collect();
    assert_eq!(model.score(&x).unwrap(), model.weights().forward(&by_hand));
    let y = features_for(
        &t.reference.source,
        Some(
            &TimedPlan::of_source(&t, &t.reference.source, &PlanLimits::default(), "ref")
                .expect("plan")
                .input(&t, &t.reference.source),
        ),
        &names,
    )
    .expect("features");
    let c = model.compare(&x, &y).unwrap();
    assert_eq!(c.uncertainty, 0.0, "one member cannot disagree with itself");
    let expected = cudaperf::ranker::sigmoid(model.score(&x).unwrap() - model.score(&y).unwrap());
    assert!((c.prob_faster - expected).abs() < 1e-6);
}

// Guards the compute side of the estimate: a kernel that evaluates every sample in double
// precision (FP64 `exp`/`cos`) and one that sums `powf` terms cost more issue slots than
// the float versions of the same work, and the estimate says so.
#[test]
fn fp64_and_powf_cost_compute_time() {
    let f64_kernel = traffic("trapezoid_integrate", "double_precision");
    let f32_kernel = traffic("trapezoid_integrate", "reference");
    assert!(
        f64_kernel["traffic_compute_time_us"] > f32_kernel["traffic_compute_time_us"] + 1.5,
        "{f64_kernel:?} vs {f32_kernel:?}"
    );
    assert!(
        f64_kernel["traffic_estimated_time_us"] > f32_kernel["traffic_estimated_time_us"] + 1.0,
        "{f64_kernel:?} vs {f32_kernel:?}"
    );
    let powf = traffic("horner_var_degree", "powf_term_sum");
    let horner = traffic("horner_var_degree", "reference");
    assert!(
        powf["traffic_compute_time_us"] > horner["traffic_compute_time_us"] + 1.5,
        "{powf:?} vs {horner:?}"
    );
    let a = analyze(source(&task("trapezoid_integrate"), "double_precision").as_bytes());
    assert!(a.totals.compute.fp64_mentions > 0);
    assert!(a.totals.compute.weighted_unsuffixed_math > 0.0);
}

// Guards the memory-parallelism term: 2,048 threads that each walk 4 columns down 8,192
// rows cannot keep enough loads in flight to stream (Little's law), so their memory time is
// far above the same bytes read by a full grid of row-split partial sums.
#[test]
fn a_few_thousand_column_walkers_are_latency_bound() {
    let walkers = traffic("col_mean", "float4_columns_ilp");
    let split = traffic("col_mean", "split_rows_atomic");
    assert!(
        walkers["traffic_memory_time_us"] > split["traffic_memory_time_us"] + 1.5,
        "{walkers:?} vs {split:?}"
    );
}

/// `cumsum_cols`' one-thread-per-column running sum with `pragma` before its row loop and
/// `restrict` on the pointers.
fn running_sum(pragma: &str, restrict: &str) -> String {
    format!(
        "// @launch cumsum_cols grid=(ceil_div(cols, 256)) block=(256)\n\
         extern \"C\" __global__ void cumsum_cols(const float* {restrict} x, float* {restrict} y,\n\
                                               int rows, int cols) {{\n\
             int c = blockIdx.x * blockDim.x + threadIdx.x;\n\
             if (c >= cols) return;\n\
             float s = 0.0f;\n\
             {pragma}\n\
             for (int r = 0; r < rows; ++r) {{\n\
                 s += x[(size_t)r * cols + c];\n\
                 y[(size_t)r * cols + c] = s;\n\
             }}\n\
         }}\n"
    )
}

// Guards the unroll term of the memory-parallelism bound: 8,192 column walkers are latency
// bound, `#pragma unroll 4` puts four rows' loads in flight,
// `#pragma unroll 1` and no pragma one — and with pointers that may alias, the store of
// each row's running sum orders the next row's load after it, so unrolling gains nothing.
#[test]
fn unrolled_loads_are_in_flight_together_unless_a_store_may_alias_them() {
    let task = task("cumsum_cols");
    let time = |pragma: &str, restrict: &str| {
        traffic_of(&task, &running_sum(pragma, restrict), pragma)["traffic_memory_time_us"]
    };
    let rolled = time("#pragma unroll 1", "__restrict__");
    assert_eq!(time("", "__restrict__"), rolled);
    let unrolled = time("#pragma unroll 4", "__restrict__");
    // Four loads and the store in flight against one of each: 2.5× the bytes, a 2.5×
    // shorter time, ~ln 2.5 lower in ln(1 + t).
    assert!(unrolled < rolled - 0.8, "{unrolled} vs {rolled}");
    assert_eq!(time("#pragma unroll 4", ""), rolled);
}

/// A column copy of `cumsum_cols`' shape (8,192 threads that each walk a column) with `fence`
/// after every store and `after` once after the loop.
fn fenced_copy(pragma: &str, fence: &str, after: &str) -> String {
    format!(
        "// @launch cumsum_cols grid=(ceil_div(cols, 256)) block=(256)\n\
         extern \"C\" __global__ void cumsum_cols(const float* __restrict__ x,\n\
                                               float* __restrict__ y, int rows, int cols) {{\n\
             int c = blockIdx.x * blockDim.x + threadIdx.x;\n\
             if (c >= cols) return;\n\
             {pragma}\n\
             for (int r = 0; r < rows; ++r) {{\n\
                 y[(size_t)r * cols + c] = x[(size_t)r * cols + c];\n\
                 {fence}\n\
             }}\n\
             {after}\n\
         }}\n"
    )
}

// Guards the fence term of the memory-parallelism bound: a `__threadfence()` after every
// store makes each iteration wait for its store to be acknowledged before the next load
// issues — two round trips per iteration instead of one, and `#pragma unroll` cannot put
// loads of several iterations in flight across the fences. A block-scope fence and one
// device fence after the loop cost (next to) nothing. Identical estimates before the probe
// counted fences: the program table's transpose `store=fenced` programs (48 pairs against
// `plain`, all slower) were ordered 0 %.
#[test]
fn a_device_fence_after_every_store_serialises_the_loop() {
    let task = task("cumsum_cols");
    let time = |pragma: &str, fence: &str, after: &str| {
        traffic_of(&task, &fenced_copy(pragma, fence, after), fence)["traffic_memory_time_us"]
    };
    let plain = time("", "", "");
    let fenced = time("", "__threadfence();", "");
    // Latency bound: twice the round trips, ~ln 2 higher in ln(1 + t).
    assert!(fenced > plain + 0.5, "{fenced} vs {plain}");
    assert_eq!(time("", "__threadfence_system();", ""), fenced);
    assert_eq!(time("#pragma unroll 4", "__threadfence();", ""), fenced);
    assert!(time("#pragma unroll 4", "", "") < plain - 0.5);
    assert_eq!(time("", "__threadfence_block();", ""), plain);
    let once = time("", "", "__threadfence();");
    assert!((once - plain).abs() < 0.01, "{once} vs {plain}");
}
