#!/usr/bin/env bash
# GPU run of issue 24 (device machine, repository root, .gpu carried with the release
# `cudaperf`): imports fixtures/pytorch with the host's PyTorch, then scores the full-size
# KernelBench level-1 ReLU (4096 x 393216 fp32) from the command line with a CUDA reference
# and an honest float4 kernel, and shows the over-cap refusal. Log under $OUT.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/nvidia/lib64:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
B=$PWD/.gpu/cudaperf
export CUDAPERF_WORKER=$B
LOG="$OUT/imported.log"
say() { echo "## $*" | tee -a "$LOG"; }
say "$(date -u) $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader); python $(python3 -c 'import torch; print(torch.__version__)')"
rm -rf /tmp/kb /tmp/kbr
say "tasks import fixtures/pytorch"
( time timeout 300 $B tasks import fixtures/pytorch --out /tmp/kb ) >> "$LOG" 2>&1; echo "exit $?" >> "$LOG"
say "tasks import fixtures/pytorch/refused (expected: one-line refusals, exit 1)"
timeout 200 $B tasks import fixtures/pytorch/refused --out /tmp/kbr >> "$LOG" 2>&1; echo "exit $?" >> "$LOG"
relu=$(ls -d /tmp/kb/*relu* 2>/dev/null | grep -i -v leaky | head -1)
say "full-size ReLU task: $relu"
if [ -n "$relu" ]; then
  cp fixtures/pytorch/kernels/relu_reference.cu "$relu/reference.cu"
  sed -i 's/^reference = "original.py"/reference = "reference.cu"/' "$relu/task.toml"
  grep -n "^reference\|^\[\[configs\]\]\|^name" "$relu/task.toml" >> "$LOG"
  for k in 1 2; do
    say "score (run $k) relu_float4_grid_stride"
    ( time timeout 200 $B score --task "$relu" --json fixtures/pytorch/kernels/relu_float4_grid_stride.cu > "$OUT/relu-score-$k.json" ) >> "$LOG" 2>&1
    echo "exit $?" >> "$LOG"
    python3 -c "import json,sys; d=json.load(open(sys.argv[1])); d=d[0] if isinstance(d,list) else d; t=(d.get('stages') or {}).get('timing') or {}; print('value', d.get('value'), 'verdict', d.get('verdict'), 'speedup', t.get('speedup'), 'ref_us', t.get('reference_us'), 'cand_us', t.get('candidate_us'), 'floor_us', t.get('floor_us'))" "$OUT/relu-score-$k.json" >> "$LOG" 2>&1
  done
  say "score with --max-buffer-gib 8 (expected: refused, naming the config and both sizes)"
  timeout 100 $B score --task "$relu" --max-buffer-gib 8 fixtures/pytorch/kernels/relu_float4_grid_stride.cu >> "$LOG" 2>&1; echo "exit $?" >> "$LOG"
fi
lk=$(ls -d /tmp/kb/*leaky* 2>/dev/null | head -1)
say "imported task with a PyTorch reference ($lk): expected GPU stage unavailable, naming the reference"
[ -n "$lk" ] && timeout 100 $B score --task "$lk" fixtures/pytorch/kernels/relu_reference.cu >> "$LOG" 2>&1; echo "exit $?" >> "$LOG"
