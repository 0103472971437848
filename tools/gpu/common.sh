# Sourced by the GPU-machine scripts of tools/gpu/: the repository root, the CUDA driver's
# library folders, the packed binaries (tools/gpu/pack.sh), $OUT for the logs, and a header
# line naming the device, the date and the core count for every log.
cd "$(dirname "${BASH_SOURCE[0]}")/../.." || exit 1
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/nvidia/lib64:${LD_LIBRARY_PATH:-}
export CARGO_MANIFEST_DIR=$PWD CUDAPERF_WORKER=$PWD/.gpu/cudaperf
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
[ -x .gpu/cudaperf ] || { echo "no .gpu/cudaperf: run tools/gpu/pack.sh and carry .gpu" >&2; exit 2; }
header() {
  echo "# $(date -u) $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | paste -sd';'), $(nproc) cores"
  echo "# command: $*"
}
