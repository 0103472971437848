#!/usr/bin/env bash
# GPU run of issue 19 (device machine, repository root, .gpu carried): every dataset
# implementation measured under protocol 3 (regimes, precision probe, state reset, two
# poisons), compared with fixtures/timings/h200.json. Logs and the timings file go to $OUT.
set -u
cd "$(dirname "$0")/../.." || exit 1
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/nvidia/lib64:${LD_LIBRARY_PATH:-}
export CUDAPERF_WORKER=$PWD/.gpu/cudaperf
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
{
echo "# cudaperf measure (protocol 3) on $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader), $(date -u)"
echo "# command: .gpu/cudaperf measure --tasks fixtures/tasks --out \$OUT/h200-p3.json"
timeout ${MEASURE_S:-540} .gpu/cudaperf measure --tasks fixtures/tasks --out "$OUT/h200-p3.json"
echo "exit status $? at $(date -u)"
} > "$OUT/measure-p3.log" 2>&1
grep -vE "  correct  " "$OUT/measure-p3.log" | tail -30
