#!/usr/bin/env bash
# GPU machine, repository root, .gpu carried (cudaperf + gpu_bench): the group of 16 three
# times with $CUDAPERF_TRACE_JOBS, so every GPU job writes where its wall time went.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/nvidia/lib64:${LD_LIBRARY_PATH:-}
export CARGO_MANIFEST_DIR=$PWD CUDAPERF_WORKER=$PWD/.gpu/cudaperf GPU_BENCH_GROUP_ONLY=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export CUDAPERF_TRACE_JOBS=$OUT/jobs.jsonl
echo "# $(date -u) $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader), $(nproc) cores"
timeout 120 .gpu/gpu_bench fixtures/tasks/${1:-vector_add}
echo "-- job traces (members > 1)"
grep -v '"members":1,' "$CUDAPERF_TRACE_JOBS" | tail -4
