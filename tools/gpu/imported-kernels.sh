#!/usr/bin/env bash
# Scores every honest kernel of fixtures/pytorch/kernels against its imported task and
# prints one line per task: id, verdict, speedup, reference_us, candidate_us (and the
# execute status, correctness and precision, the reason when the GPU stage did not run).
#
# usage: tools/gpu/imported-kernels.sh CUDAPERF TASKS_DIR [KERNELS_DIR]
#   CUDAPERF   the cudaperf binary (release build)
#   TASKS_DIR  the folder `cudaperf tasks import fixtures/pytorch --out TASKS_DIR` wrote
#              (19_ReLU needs --max-buffer-gib 16 without a GPU; on an H200 the cap is 35 GiB)
#   KERNELS_DIR  default fixtures/pytorch/kernels: <task id>.cu per task; the 19_relu task
#              takes relu_float4_grid_stride.cu.
# Extra flags for every `score` go in $SCORE_FLAGS (e.g. "--max-buffer-gib 16"); each
# score's JSON is kept under $OUT/imported-kernels/ when $OUT is set. Needs python3 (JSON).
# Exits 0 when every kernel was scored (whatever its verdict), 1 when one could not be.
# Runs without a GPU too: then every line says the GPU stage is unavailable.
set -u
[ $# -ge 2 ] || { sed -n 2,14p "$0" >&2; exit 2; }
B=$1 TASKS=$2
K=${3:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)/fixtures/pytorch/kernels}
JSON_DIR=${OUT:+$OUT/imported-kernels}
JSON_DIR=${JSON_DIR:-$(mktemp -d)}
mkdir -p "$JSON_DIR"
export CUDAPERF_WORKER=${CUDAPERF_WORKER:-$B}
status=0
printf '%-22s %-10s %8s %12s %12s  %s\n' task verdict speedup reference_us candidate_us detail
for task in "$TASKS"/*/; do
  task=${task%/}
  id=$(basename "$task")
  [ -f "$task/task.toml" ] || continue
  kernel="$K/$id.cu"
  [ "$id" = 19_relu ] && kernel="$K/relu_float4_grid_stride.cu"
  if [ ! -f "$kernel" ]; then
    printf '%-22s %s\n' "$id" "no kernel ($kernel)"
    status=1
    continue
  fi
  json="$JSON_DIR/$id.json"
  # shellcheck disable=SC2086
  "$B" score --task "$task" --json ${SCORE_FLAGS:-} "$kernel" > "$json" 2> "$JSON_DIR/$id.stderr"
  rc=$?
  python3 - "$id" "$json" "$rc" "$JSON_DIR/$id.stderr" <<'PY' || status=1
import json, sys
tid, path, rc, err = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
try:
    d = json.load(open(path))
except Exception:  # no JSON: the command failed before scoring
    last = (open(err).read().strip().splitlines() or ["(no output)"])[-1]
    print(f"{tid:22s} score failed (exit {rc}): {last}")
    sys.exit(1)
d = d[0] if isinstance(d, list) else d
st = d.get("stages") or {}
t = st.get("timing") or {}
ex = st.get("execute") or {}
co = st.get("correctness") or {}
def num(v):
    return f"{v:.4g}" if isinstance(v, (int, float)) else "-"
detail = [f"execute={ex.get('status', '-')}"]
if co:
    detail.append(f"correct={co.get('passed')} pass_rate={num(co.get('pass_rate'))} precision={co.get('precision') or '-'}")
if t.get("reference"):
    detail.append(f"reference={t.get('reference')}")
if ex.get("reason"):
    detail.append(f"reason={ex['reason']}")
for s in ("extract", "compile"):
    e = st.get(s) or {}
    if e and not e.get("ok", True):
        detail.append(f"{s}: {e.get('error') or e.get('status')}")
print(f"{tid:22s} {d.get('verdict', '-'):10s} {num(t.get('speedup')):>8s} {num(t.get('reference_us')):>12s} {num(t.get('candidate_us')):>12s}  {' '.join(detail)}")
PY
done
exit $status
