#!/usr/bin/env bash
# GPU run of issue 19 (device machine, repository root, .gpu carried; pack here first with
# tools/gpu/pack-integrity.sh): the leftovers probe (shared/local memory across launches),
# the GPU tests of protocol 3 (integrity attacks alone and in group jobs, timeouts by cause,
# hostile/hack verdicts, the timing attacks), the gather regression test of the originals
# check, gpu_bench, and `measure` on the tasks a precision probe could misjudge. Logs in $OUT.
set -u
cd "$(dirname "$0")/../.." || exit 1
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/nvidia/lib64:${LD_LIBRARY_PATH:-}
export CUDAPERF_WORKER=$PWD/.gpu/cudaperf CARGO_MANIFEST_DIR=$PWD
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
step() { echo "== $1 ($(date -u +%H:%M:%S))"; }
{
echo "# $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader), $(date -u)"
step "leftovers probe"
(cd tools/gpu-probe && nvcc -O2 -arch=sm_90 -o /tmp/leftovers leftovers.cu && timeout 60 /tmp/leftovers)
step "GPU tests"
timeout ${TESTS_S:-300} .gpu/bin/gpu --include-ignored --nocapture --test-threads=1 ${TESTS:-integrity timeouts hostile timing_attacks_are_stopped}
echo "gpu tests exit $?"
step "originals: the reference reads the inputs it was given"
timeout ${ORIG_S:-60} .gpu/bin/originals --include-ignored --nocapture the_reference_run_reads_the_inputs_it_was_given
echo "originals test exit $?"
step "gpu_bench"
timeout ${BENCH_S:-120} .gpu/gpu_bench fixtures/tasks/vector_add
echo "gpu_bench exit $?"
step "measure (precision-sensitive tasks)"
timeout ${MEASURE_S:-150} .gpu/cudaperf measure --tasks fixtures/tasks --only "${ONLY:-dot_product,sum_dim,cumsum_rows,softmax_rows,layernorm,matmul,sgemm,bmm,gemm_hardswish,attention_softmax_v,nbody_forces,black_scholes,matvec,row_variance,tril_matvec,linear_gelu_tanh}" --out "$OUT/measure-subset.json"
echo "measure exit $?"
} 2>&1 | tee "$OUT/integrity-verify.log"
