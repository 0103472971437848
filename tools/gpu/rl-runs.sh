#!/usr/bin/env bash
# GPU run of issue 11 (device machine, repository root, .gpu-rl carried): the reference
# GRPO loop and the reward ablation with the full reward (measured speedups). Each example
# serves as its own sandbox worker. Every line of both runs goes to the log (step 0
# included: no `tail`); outputs are tarred into $OUT (the tool brings back at most 8 files).
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/nvidia/lib64:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT" /tmp/rl
echo "# $(date -u) $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader), $(nproc) cores" | tee "$OUT/rl.log"
timeout ${GRPO_S:-270} .gpu-rl/grpo --steps ${STEPS:-20} --group 8 --budget-s ${GRPO_BUDGET:-170} --out /tmp/rl/grpo >> "$OUT/rl.log" 2>&1
echo "grpo exit $?" >> "$OUT/rl.log"
timeout ${ABL_S:-290} .gpu-rl/cudaperf_ablation --seeds 3 --steps ${ABL_STEPS:-10} --group 8 --budget-s ${ABL_BUDGET:-150} --out /tmp/rl/ablation >> "$OUT/rl.log" 2>&1
echo "ablation exit $?" >> "$OUT/rl.log"
tar czf "$OUT/rl.tgz" -C /tmp/rl .
tail -50 "$OUT/rl.log"
