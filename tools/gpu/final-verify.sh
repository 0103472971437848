#!/usr/bin/env bash
# One device call (repository root on the GPU machine, .gpu carried): the merged tree's GPU
# tests (timing attacks alone and in group jobs, hostile/hack verdicts, runner isolation,
# schedules, compute floor), gpu_bench (issue 13's table), then serve + node with the GPU
# stages (issue 12). Pack here first with tools/gpu/pack-final.sh. Logs go to $OUT.
set -u
cd "$(dirname "$0")/../.." || exit 1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
# tools/gpu-serve-node.sh looks for its binaries in .gpu-serve/.
[ -e .gpu-serve ] || ln -s .gpu .gpu-serve
TESTS_S=${TESTS_S:-200} BENCH_S=${BENCH_S:-200} OUT=$OUT bash tools/gpu/v2-group.sh
echo "== serve + node"
OUT=$OUT timeout ${SERVE_S:-150} bash tools/gpu-serve-node.sh > /dev/null 2>&1
echo "serve+node exit $?"
grep -E "^==|summary|correct|speedup|SKIPPED|status" "$OUT/gpu-serve-node.log" | head -40
