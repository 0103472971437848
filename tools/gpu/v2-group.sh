#!/usr/bin/env bash
# GPU run of issue 13 (device machine, repository root, .gpu carried): the GPU tests (timing
# attacks alone and in group jobs, hostile/hack verdicts in one pool, isolation, schedules,
# compute floor), then gpu_bench. Logs go to $OUT.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/nvidia/lib64:${LD_LIBRARY_PATH:-}
export CARGO_MANIFEST_DIR=$PWD CUDAPERF_WORKER=$PWD/.gpu/cudaperf
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
{
echo "# $(date -u) $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader), $(nproc) cores"
echo "# command: .gpu/bin/gpu --include-ignored --nocapture --test-threads=1 ${TESTS:-}"
timeout ${TESTS_S:-300} .gpu/bin/gpu --include-ignored --nocapture --test-threads=1 ${TESTS:-}
echo "exit status $?"
} > "$OUT/gpu-tests.log" 2>&1
grep -E "^test |test result|FAILED|panicked" "$OUT/gpu-tests.log" | head -30
{
echo "# $(date -u) gpu_bench, $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader), $(nproc) cores"
timeout ${BENCH_S:-240} .gpu/gpu_bench fixtures/tasks/vector_add
echo "exit status $?"
} 2>&1 | tee "$OUT/gpu-bench.log" | tail -24
