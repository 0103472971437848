#!/usr/bin/env bash
# GPU machine, repository root, .gpu carried (cudaperf + gpu_bench): the group of 16 under
# each host-wait setting of the CUDA contexts ($CUDAPERF_CTX_SCHED), three groups each.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/nvidia/lib64:${LD_LIBRARY_PATH:-}
export CARGO_MANIFEST_DIR=$PWD CUDAPERF_WORKER=$PWD/.gpu/cudaperf GPU_BENCH_GROUP_ONLY=1
echo "# $(date -u) $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader), $(nproc) cores"
for s in auto spin yield blocking auto; do
    echo "== CUDAPERF_CTX_SCHED=$s"
    CUDAPERF_CTX_SCHED=$s timeout 60 .gpu/gpu_bench fixtures/tasks/vector_add
done
