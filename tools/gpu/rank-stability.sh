#!/usr/bin/env bash
# GPU machine, repository root, .gpu carried (cudaperf + gpu_bench): gpu_bench's rank-stability
# rows only, twice (vector_add: 4 implementations x 4 copies, per-candidate vs group jobs).
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/nvidia/lib64:${LD_LIBRARY_PATH:-}
export CARGO_MANIFEST_DIR=$PWD CUDAPERF_WORKER=$PWD/.gpu/cudaperf GPU_BENCH_RANK_ONLY=1
echo "# $(date -u) $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader), $(nproc) cores"
timeout 200 .gpu/gpu_bench fixtures/tasks/${1:-vector_add}
