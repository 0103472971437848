#!/usr/bin/env bash
# GPU run of issue 21 (device machine, repository root): re-measures the tasks $TASKS after
# their speed knobs were reshaped, in ONE call and two phases:
#   1. every hazard-free program of a SUPERSET of speed options (examples/common/space as
#      committed for the run) -> phase1.jsonl;
#   2. tools/gpu/rl-select.py picks, per speed knob, the options that keep the share of
#      near-best combinations smallest (its rule is fixed in the script, before any
#      number is seen), sized so that phase 2 fits the time left;
#   3. every hazard program of the chosen options -> phase2.jsonl.
# $D holds the release `program_table` (its own sandbox worker), `hashes.txt`
# (program_table [--superset] --tasks $TASKS --hashes) and `free.txt` (the hazard-free
# `task hash` lines), and rl-select.py. SUPERSET=1 measures the tasks' supersets
# (`space::SUPERSETS`) rather than their spaces. Every line goes to $OUT/table2.log.
#   2026-12-02: TASKS=softmax_rows,transpose (defaults; the superset was then the space);
#   prepared 2026-12-07 (not run, see docs/rl/README.md): SUPERSET=1 TASKS=transpose
#   LANES=2 RATE=20 MAX_CAP=4608 TOTAL_S=540 P1_S=300.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/nvidia/lib64:${LD_LIBRARY_PATH:-}
D=${D:-runs/h21-gpu}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
TASKS=${TASKS:-softmax_rows,transpose}
NTASKS=$(echo "$TASKS" | tr ',' '\n' | grep -c .)
LANES=${LANES:-1}
TOTAL_S=${TOTAL_S:-505}
START=$(date +%s)
LOG="$OUT/table2.log"
since() { echo $(( $(date +%s) - START )); }
echo "# $(date -u) $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader), $(nproc) cores; tasks $TASKS" | tee -a "$LOG"
"$D/program_table" ${SUPERSET:+--superset} --tasks "$TASKS" --only "$D/free.txt" --out "$OUT/phase1.jsonl" \
  --group 24 --lanes "$LANES" --budget-s "${P1_S:-260}" >> "$LOG" 2>&1
echo "phase 1 exit $? after $(since) s" | tee -a "$LOG"
# Phase 2 measures ~$RATE hazard programs a second over all tasks (compile-bound;
# 2026-12-02 table: 8,800 in 267 s with three tasks; 5,760 in 205 s with two): the largest
# space that fits the time left, <= $MAX_CAP per task (15 of 16 programs carry a hazard).
AVAIL=$(( TOTAL_S - $(since) - 25 ))
MAX=$(( AVAIL * ${RATE:-30} / NTASKS * 16 / 15 ))
[ "$MAX" -gt "${MAX_CAP:-4400}" ] && MAX=${MAX_CAP:-4400}
echo "phase 2: $AVAIL s left, at most $MAX programs per task" | tee -a "$LOG"
python3 "$D/rl-select.py" --hashes "$D/hashes.txt" --table "$OUT/phase1.jsonl" \
  --only-out "$OUT/phase2-only.txt" --report "$OUT/select.txt" --max "$MAX" >> "$LOG" 2>&1
echo "select exit $? after $(since) s" | tee -a "$LOG"
cat "$OUT/select.txt"
"$D/program_table" ${SUPERSET:+--superset} --tasks "$TASKS" --only "$OUT/phase2-only.txt" \
  --out "$OUT/phase2.jsonl" --group 24 --lanes "$LANES" \
  --budget-s $(( TOTAL_S - $(since) - 10 )) >> "$LOG" 2>&1
echo "phase 2 exit $? after $(since) s" | tee -a "$LOG"
grep -E "wave [0-9]*[05]0:|budget|error|UNAVAILABLE" "$LOG" | tail -20
gzip -f "$OUT/phase1.jsonl" "$OUT/phase2.jsonl"
ls -la "$OUT"
