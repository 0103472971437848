#!/usr/bin/env bash
# GPU run of issue 21 (device machine, repository root, .gpu-rl carried with the release
# binary `program_table`): measures the sparse program space once into a program table.
# One call measures one shard and stops starting new groups after BUDGET_S seconds (the
# device call's limit is 10 minutes); run it again with the same SHARD to resume: the
# table already in $TABLE is skipped. Every line goes to the log (no `tail`).
#   SHARD=0/2 tools/gpu/rl-table.sh ; SHARD=1/2 tools/gpu/rl-table.sh
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/nvidia/lib64:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
TABLE=${TABLE:-docs/rl/table/program_table.jsonl}
mkdir -p "$(dirname "$TABLE")"
LOG="$OUT/table-$(echo "${SHARD:-0/1}" | tr / -).log"
echo "# $(date -u) $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader), $(nproc) cores, shard ${SHARD:-0/1}" | tee -a "$LOG"
timeout ${TIMEOUT_S:-570} .gpu-rl/program_table --shard "${SHARD:-0/1}" --resume "$TABLE" --budget-s ${BUDGET_S:-480} >> "$LOG" 2>&1
echo "program_table exit $?" >> "$LOG"
cp "$TABLE" "$OUT/"
.gpu-rl/program_table --summary "$TABLE" | tee -a "$LOG"
