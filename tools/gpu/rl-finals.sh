#!/usr/bin/env bash
# GPU run of issue 21 (device machine, repository root): re-measures the distinct final
# programs of a replayed ablation (docs/rl/replay/finals.txt, `task hash` lines) and compares
# each re-measured speedup with the table's. $D holds the release `program_table` (its own
# sandbox worker; built from the same space code as the table). Logs: $OUT/finals.log,
# $OUT/finals-remeasured.jsonl.
#   D=.gpu-rl bash tools/gpu/rl-finals.sh
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/nvidia/lib64:${LD_LIBRARY_PATH:-}
D=${D:-.gpu-rl}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
FINALS=${FINALS:-docs/rl/replay/finals.txt}
TABLE=${TABLE:-docs/rl/table/program_table.jsonl.gz}
LOG="$OUT/finals.log"
echo "# $(date -u) $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader), $(nproc) cores; $FINALS" | tee -a "$LOG"
timeout "${TIMEOUT_S:-300}" "$D/program_table" --only "$FINALS" --out "$OUT/finals-remeasured.jsonl" \
  --budget-s "${BUDGET_S:-240}" >> "$LOG" 2>&1
echo "program_table exit $?" | tee -a "$LOG"
python3 - "$TABLE" "$OUT/finals-remeasured.jsonl" <<'PY' 2>&1 | tee -a "$LOG"
import gzip, json, statistics, sys
table = {}
with gzip.open(sys.argv[1], "rt") as f:
    for l in f:
        r = json.loads(l)
        table[(r["task"], r["hash"])] = r
rows = [json.loads(l) for l in open(sys.argv[2]) if l.strip()]
ratios, wrong = [], []
for r in rows:
    t = table.get((r["task"], r["hash"]))
    if r["verdict"] != "correct" or t is None or not t.get("speedup") or not r.get("speedup"):
        wrong.append(f"{r['task']} {r['hash']} {r['verdict']}")
        continue
    ratios.append(r["speedup"] / t["speedup"])
print(f"{len(rows)} re-measured, {len(ratios)} correct with a table speedup; not: {wrong}")
if ratios:
    print(f"re-measured / table speedup: median {statistics.median(ratios):.4f}, "
          f"min {min(ratios):.3f}, max {max(ratios):.3f}")
# Per task too: the table's tasks may come from different cards (the table's README says which).
by_task = {}
for r in rows:
    t = table.get((r["task"], r["hash"]))
    if r["verdict"] == "correct" and t and t.get("speedup") and r.get("speedup"):
        by_task.setdefault(r["task"], []).append(r["speedup"] / t["speedup"])
for task, rs in sorted(by_task.items()):
    print(f"  {task}: {len(rs)} programs, median {statistics.median(rs):.4f}, "
          f"min {min(rs):.3f}, max {max(rs):.3f}")
PY
