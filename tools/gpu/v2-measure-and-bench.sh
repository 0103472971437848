#!/usr/bin/env bash
# GPU run of issue 9 (device machine, repository root, .gpu carried): re-measure every
# dataset implementation with protocol v2, compare with fixtures/timings/h200.json (v1),
# and run gpu_bench. Logs and the new timings file go to $OUT.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/nvidia/lib64:${LD_LIBRARY_PATH:-}
export CUDAPERF_WORKER=$PWD/.gpu/cudaperf
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
{
echo "# cudaperf measure (protocol v2) on $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader), $(date -u)"
echo "# command: .gpu/cudaperf measure --tasks fixtures/tasks --out \$OUT/h200-v2.json"
timeout ${MEASURE_S:-400} .gpu/cudaperf measure --tasks fixtures/tasks --out "$OUT/h200-v2.json"
echo "exit status $?"
} > "$OUT/v2-measure.log" 2>&1
python3 tools/compare-timings.py fixtures/timings/h200.json "$OUT/h200-v2.json" > "$OUT/v2-compare.log" 2>&1
tail -25 "$OUT/v2-compare.log"
{
echo "# $(date -u) gpu_bench (protocol v2), $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader)"
timeout ${BENCH_S:-140} .gpu/gpu_bench fixtures/tasks/vector_add
} 2>&1 | tee "$OUT/v2-gpu-bench.log" | tail -16
