#!/usr/bin/env bash
# GPU machine, repository root, .gpu carried (tools/gpu/pack.sh): every dataset
# implementation measured (`cudaperf measure`; ONLY=id,id,... for some tasks), then compared
# with the committed timings (tools/compare-timings.py: speedups that moved past their
# interval, noise floor and 2 %). The timings file that replaces fixtures/timings/h200.json
# after an H200 run is $OUT/measure.json.
#   Logs: $OUT/measure.log, $OUT/measure-vs-h200.txt.
set -u
source "$(dirname "$0")/common.sh"
only=(); [ -n "${ONLY:-}" ] && only=(--only "$ONLY")
cmd=(.gpu/cudaperf measure --tasks fixtures/tasks --out "$OUT/measure.json" "${only[@]}")
{ header "${cmd[*]}"; timeout "${MEASURE_S:-540}" "${cmd[@]}"; echo "exit status $?"; } > "$OUT/measure.log" 2>&1
grep -vE "  correct  " "$OUT/measure.log" | tail -30
python3 tools/compare-timings.py fixtures/timings/h200.json "$OUT/measure.json" > "$OUT/measure-vs-h200.txt" 2>&1
tail -15 "$OUT/measure-vs-h200.txt"
