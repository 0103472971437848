#!/usr/bin/env bash
# GPU machine, repository root, .gpu carried (tools/gpu/pack.sh): `gpu_bench` on a task
# (default vector_add), the latency and group-job tables of docs/benchmarks.md.
#   usage: bash tools/gpu/bench.sh [full|group|rank|sched|two-gpus] [task]
#     full      every row (default)
#     group     the group of 16 only, each GPU job's trace in $OUT/jobs.jsonl
#               ($CUDAPERF_TRACE_JOBS: where a job's wall time went)
#     rank      the rank-stability rows only (4 implementations x 4 copies, twice)
#     sched     the group of 16 under each host-wait setting of the CUDA contexts
#               ($CUDAPERF_CTX_SCHED: auto spin yield blocking auto)
#     two-gpus  a group of 32 on GPU 0, then on GPUs 0 and 1 (a 2-GPU machine)
#   Log: $OUT/gpu-bench-<mode>.log.
set -u
source "$(dirname "$0")/common.sh"
mode=${1:-full}
task=fixtures/tasks/${2:-vector_add}
log="$OUT/gpu-bench-$mode.log"
{ header ".gpu/gpu_bench $task ($mode)"
  case $mode in
    full) timeout "${BENCH_S:-240}" .gpu/gpu_bench "$task" ;;
    group) CUDAPERF_TRACE_JOBS=$OUT/jobs.jsonl GPU_BENCH_GROUP_ONLY=1 timeout 120 .gpu/gpu_bench "$task"
           echo "-- job traces (members > 1)"; grep -v '"members":1,' "$OUT/jobs.jsonl" | tail -4 ;;
    rank) GPU_BENCH_RANK_ONLY=1 timeout 200 .gpu/gpu_bench "$task" ;;
    sched) for s in auto spin yield blocking auto; do
             echo "== CUDAPERF_CTX_SCHED=$s"
             CUDAPERF_CTX_SCHED=$s GPU_BENCH_GROUP_ONLY=1 timeout 60 .gpu/gpu_bench "$task"
           done ;;
    two-gpus) for devs in 0 0,1; do
                echo "== CUDA_VISIBLE_DEVICES=$devs"
                CUDA_VISIBLE_DEVICES=$devs GPU_BENCH_GROUP_ONLY=1 GPU_BENCH_GROUP_SIZE=32 \
                  timeout 90 .gpu/gpu_bench "$task"
              done ;;
    *) echo "unknown mode $mode (full, group, rank, sched, two-gpus)"; exit 2 ;;
  esac
  echo "exit status $?"
} 2>&1 | tee "$log" | tail -30
