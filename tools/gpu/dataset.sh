#!/usr/bin/env bash
# GPU machine, repository root, .gpu carried (tools/gpu/pack.sh): the dataset's checks.
# Originals against references and the CPU input generator against the device's
# (`dataset check-originals --gpu`; the reference samples CI compares with are written to
# $OUT/h200-samples.json), the GPU tests, `cudaperf measure`, and PyTorch-eager times of the
# torch2cuda originals (needs python3 with torch).
# STEPS picks steps (default all: originals,tests,measure,eager); ONLY limits the tasks of
# originals and measure (MEASURE_ONLY: measure alone, EAGER_ONLY: eager alone); *_S are the
# time limits. Logs go to $OUT.
set -u
source "$(dirname "$0")/common.sh"
STEPS=${STEPS:-originals,tests,measure,eager}
only=(); [ -n "${ONLY:-}" ] && only=(--only "$ONLY")
monly=("${only[@]}"); [ -n "${MEASURE_ONLY:-}" ] && monly=(--only "$MEASURE_ONLY")
eonly=(); [ -n "${EAGER_ONLY:-}" ] && eonly=(--only "$EAGER_ONLY")
step() { [[ ",$STEPS," == *",$1,"* ]]; }
if step originals; then
  cmd=(.gpu/cudaperf dataset check-originals --tasks fixtures/tasks --gpu --write-samples "$OUT/h200-samples.json" --json "$OUT/check-originals.json" "${only[@]}")
  { header "${cmd[*]}"; timeout "${ORIG_S:-240}" "${cmd[@]}"; echo "exit status $?"; } > "$OUT/check-originals.log" 2>&1
  grep -v " ok (" "$OUT/check-originals.log" | tail -40
fi
if step tests; then
  { header ".gpu/bin/gpu --include-ignored --nocapture --test-threads=1 ${TESTS:-}"
    timeout "${TESTS_S:-300}" .gpu/bin/gpu --include-ignored --nocapture --test-threads=1 ${TESTS:-}; echo "exit status $?"; } > "$OUT/gpu-tests.log" 2>&1
  grep -E "^test |test result|panicked" "$OUT/gpu-tests.log" | head -30
fi
if step measure; then
  cmd=(.gpu/cudaperf measure --tasks fixtures/tasks --out "$OUT/h200-measure.json" "${monly[@]}")
  { header "${cmd[*]}"; timeout "${MEASURE_S:-300}" "${cmd[@]}"; echo "exit status $?"; } > "$OUT/measure.log" 2>&1
  grep -v "  correct  " "$OUT/measure.log" | tail -40
fi
if step eager; then
  cmd=(.gpu/cudaperf dataset torch-eager --tasks fixtures/tasks --out "$OUT/torch-eager.json" --timings "${EAGER_TIMINGS:-fixtures/timings/h200.json}" "${eonly[@]}")
  { header "${cmd[*]}"; echo "# $(python3 -c 'import torch; print("torch", torch.__version__)' 2>&1)"; timeout "${EAGER_S:-200}" "${cmd[@]}"; echo "exit status $?"; } > "$OUT/torch-eager.log" 2>&1
  tail -60 "$OUT/torch-eager.log"
fi
