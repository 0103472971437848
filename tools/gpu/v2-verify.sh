#!/usr/bin/env bash
# GPU run of issue 9 (on the device machine, from the repository root, with .gpu carried):
# the GPU tests (hostile and hack verdicts, timing attacks, isolation, schedules, compute
# floor). Usage: bash tools/gpu/v2-verify.sh [TEST_FILTER]
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/nvidia/lib64:${LD_LIBRARY_PATH:-}
export CARGO_MANIFEST_DIR=$PWD CUDAPERF_WORKER=$PWD/.gpu/cudaperf
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
{
echo "# $(date -u) $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader)"
echo "# command: .gpu/bin/gpu --include-ignored --nocapture --test-threads=1 ${1:-}"
timeout 420 .gpu/bin/gpu --include-ignored --nocapture --test-threads=1 ${1:-}
echo "exit status $?"
} 2>&1 | tee "$OUT/v2-gpu-tests.log"
