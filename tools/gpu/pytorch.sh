#!/usr/bin/env bash
# GPU run of the PyTorch reference (issue 24), on the device machine from the repository
# root with .gpu carried (tools/gpu/pack.sh). Needs the host's python3 with PyTorch for CUDA
# (or $CUDAPERF_TORCH_PYTHON). Logs and JSON under $OUT:
#  1. the gpu_torch tests (task original vs eager/compile, imported problems, broken originals);
#  2. fixtures/pytorch imported with no code of their own, each honest kernel of
#     fixtures/pytorch/kernels scored against PyTorch eager and torch.compile;
#  3. the full-size KernelBench level-1 ReLU (4096 x 393216 fp32, 12 GiB) scored from the
#     command line against eager;
#  4. per-candidate wall time: the same implementations of torch2cuda tasks scored against
#     their CUDA reference and against PyTorch eager, one table.
#   usage: TESTS_S=240 [TESTS_FILTER=name] [COMPILE_TASKS='a b'] [TABLE_TASKS='a b'] bash tools/gpu/pytorch.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
B=$PWD/.gpu/cudaperf
LOG="$OUT/pytorch.log"
header "tools/gpu/pytorch.sh" > "$LOG"
say() { echo "## $*" | tee -a "$LOG"; }
say "python: $(${CUDAPERF_TORCH_PYTHON:-python3} -c 'import torch; print(torch.__version__, torch.version.cuda, torch.cuda.get_device_name())' 2>&1 | tail -1)"

if [ "${SKIP_TESTS:-0}" != 1 ]; then
  say "1. gpu_torch tests"
  timeout "${TESTS_S:-240}" .gpu/bin/gpu_torch --include-ignored --test-threads=1 --nocapture ${TESTS_FILTER:-} > "$OUT/gpu_torch.log" 2>&1
  echo "exit $?" >> "$OUT/gpu_torch.log"
  grep -E "^test |test result|vs |^[a-z0-9_]+ +(correct|incorrect)|panicked|SKIPPED" "$OUT/gpu_torch.log" | tee -a "$LOG"
fi

say "2. import fixtures/pytorch, score fixtures/pytorch/kernels against eager and torch.compile"
rm -rf /tmp/kb
( time timeout 200 $B tasks import fixtures/pytorch --out /tmp/kb --max-buffer-gib 40 ) >> "$LOG" 2>&1; echo "exit $?" >> "$LOG"
for k in fixtures/pytorch/kernels/*.cu; do
  id=$(basename "$k" .cu)
  case "$id" in
    relu_reference) continue ;;
    relu_float4_grid_stride) id=19_relu ;;
  esac
  [ -d "/tmp/kb/$id" ] || { say "no imported task for $k"; continue; }
  for ref in torch-eager torch-compile; do
    # torch.compile compiles once per config shape (seconds each): a few tasks only.
    [ "$ref" = torch-compile ] && ! [[ " ${COMPILE_TASKS:-leaky_relu softmax layer_norm matmul} " == *" $id "* ]] && continue
    s=$(date +%s.%N)
    timeout 240 $B score --task "/tmp/kb/$id" --reference "$ref" --max-buffer-gib 40 --json "$k" > "$OUT/imp-$id-$ref.json" 2>> "$LOG"
    rc=$?; e=$(date +%s.%N)
    python3 tools/gpu/score-table.py "$ref" "$OUT/imp-$id-$ref.json" | sed "s/\$/\twall_s=$(python3 -c "print(round($e-$s,2))") rc=$rc/" | tee -a "$LOG"
  done
done

say "3. full-size ReLU (4096 x 393216 fp32) against eager, twice (cold, then warm files)"
for k in 1 2; do
  s=$(date +%s.%N)
  timeout 240 $B score --task /tmp/kb/19_relu --max-buffer-gib 40 --json fixtures/pytorch/kernels/relu_float4_grid_stride.cu > "$OUT/relu-eager-$k.json" 2>> "$LOG"
  rc=$?; e=$(date +%s.%N)
  python3 tools/gpu/score-table.py "relu-run$k" "$OUT/relu-eager-$k.json" | sed "s/\$/\twall_s=$(python3 -c "print(round($e-$s,2))") rc=$rc/" | tee -a "$LOG"
done

say "4. wall time per candidate: CUDA reference vs PyTorch eager (same implementations)"
for t in ${TABLE_TASKS:-add_layernorm softmax_rows gelu conv2d matmul_bias_relu layernorm sum_dim cross_entropy rmsnorm transpose_add maxpool2d embedding}; do
  impls=$(python3 -c "
import re; m=re.search(r'^implementations\s*=\s*\[(.*?)\]', open('fixtures/tasks/$t/task.toml').read(), re.M|re.S)
print(' '.join('fixtures/tasks/$t/'+i for i in re.findall(r'\"([^\"]+)\"', m.group(1) if m else '')))")
  for ref in task torch-eager; do
    s=$(date +%s.%N)
    timeout 200 $B score --task "fixtures/tasks/$t" --reference "$ref" --json $impls > "$OUT/wall-$t-$ref.json" 2>> "$LOG"
    rc=$?; e=$(date +%s.%N)
    n=$(echo $impls | wc -w)
    python3 tools/gpu/score-table.py "$t/$ref" "$OUT/wall-$t-$ref.json" >> "$OUT/wall-rows.tsv"
    echo -e "WALL\t$t\t$ref\tfiles=$n\twall_s=$(python3 -c "print(round($e-$s,2))")\tper_file_s=$(python3 -c "print(round(($e-$s)/$n,3))")\trc=$rc" | tee -a "$LOG"
  done
done
cat "$OUT/wall-rows.tsv" >> "$LOG"
say "done $(date -u)"
