#!/usr/bin/env bash
# CPU host, repository root, after the device call of tools/gpu/rl-table2.sh that re-measured
# ONE task's superset (issue 21). F is the folder the call's files came back to
# (console.log, table2.log, select.txt, phase1.jsonl.gz, phase2.jsonl.gz):
#   F=/work/.device/... TASK=transpose FILE=transpose.rs DATE=2026-12-07 tools/gpu/rl-after-table2.sh
# Keeps the logs, the selection and the superset's hazard-free rows under
# docs/rl/table/remeasure-$DATE/; narrows the space's code to the picked options
# (rl-narrow.py); builds; puts the task's re-measured rows into the table with the narrowed
# knobs (rl-merge.py); refreshes the ranker columns (held-out ranker); prints the summary;
# cuts the CI sub-table; moves the previous replay's finals to docs/rl/replay-before-$DATE/;
# replays the ablation and writes its distinct final programs.
# What is left by hand: tests/replay.rs's asserted sparsity figures (from cut.txt), the
# space's doc comments, docs/rl/README.md, CHANGELOG.md, and the GPU re-measure of the
# final programs (tools/gpu/rl-finals.sh).
set -eu
: "${F:?F = the folder of the files of the call}" "${TASK:=transpose}" "${FILE:=$TASK.rs}" "${DATE:?}"
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-target}
B=$CARGO_TARGET_DIR/release/examples
T=docs/rl/table/program_table.jsonl.gz
KEEP=docs/rl/table/remeasure-$DATE
mkdir -p "$KEEP"
cp "$F/console.log" "$F/table2.log" "$F/select.txt" "$F/phase1.jsonl.gz" "$KEEP/"
grep -q "^CHOICE $TASK " "$F/select.txt" || { echo "no selection for $TASK in $F/select.txt" >&2; exit 2; }
python3 tools/gpu/rl-narrow.py --file "examples/common/space/$FILE" --task "$TASK" --choice "$F/select.txt"
cargo fmt
cargo build --release --example program_table --example cudaperf_ablation
W=$(mktemp -d)
"$B/program_table" --tasks "$TASK" --hashes "$W/hashes.txt"
python3 tools/gpu/rl-merge.py --table "$T" --task "$TASK" --hashes "$W/hashes.txt" \
  --rows "$F/phase1.jsonl.gz" "$F/phase2.jsonl.gz" --out "$W/merged.jsonl"
"$B/program_table" --ranker-only "$W/merged.jsonl" \
  --ranker-model fixtures/models/ranker-heldout-rl --out "$W/ranked.jsonl"
gzip -9 -c "$W/ranked.jsonl" > "$T"
"$B/program_table" --summary "$T" | tee "$KEEP/summary.txt"
"$B/program_table" --cut "$T" --out fixtures/rl/program_table.sub.jsonl.gz | tee "$KEEP/cut.txt"
# The previous replay's final programs and their GPU re-measure go with it.
PREV=docs/rl/replay-before-$DATE
mkdir -p "$PREV"
for f in finals.txt finals-remeasured.jsonl; do
  [ -f "docs/rl/replay/$f" ] && git mv "docs/rl/replay/$f" "$PREV/$f"
done
"$B/cudaperf_ablation" --table "$T" --out docs/rl/replay
python3 - docs/rl/replay/ablation.json > docs/rl/replay/finals.txt <<'PY'
import json, sys
runs = json.load(open(sys.argv[1]))["runs"]
for task, h in sorted({(r["task"], r["final_hash"]) for r in runs if r.get("final_hash")}):
    print(task, h)
PY
echo "finals: $(wc -l < docs/rl/replay/finals.txt) distinct final programs (docs/rl/replay/finals.txt)"
rm -r "$W"
