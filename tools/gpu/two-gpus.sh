#!/usr/bin/env bash
# 2-GPU machine, repository root, .gpu carried (cudaperf + gpu_bench): a group of 32 vector_add
# candidates on one GPU and then on both (three groups each, after a warm-up group), for
# issue 13's target (2 GPUs <= 0.6 x 1 GPU).
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/nvidia/lib64:${LD_LIBRARY_PATH:-}
export CARGO_MANIFEST_DIR=$PWD CUDAPERF_WORKER=$PWD/.gpu/cudaperf GPU_BENCH_GROUP_ONLY=1 GPU_BENCH_GROUP_SIZE=32
echo "# $(date -u) $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | paste -sd';'), $(nproc) cores"
for devs in 0 0,1; do
    echo "== CUDA_VISIBLE_DEVICES=$devs"
    CUDA_VISIBLE_DEVICES=$devs timeout 90 .gpu/gpu_bench fixtures/tasks/vector_add
done
