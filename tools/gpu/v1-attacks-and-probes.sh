#!/usr/bin/env bash
# GPU run 1 of issue 9 (on the device machine, from the repository root, with .gpu carried):
#  (a) the isolation/cost probes of tools/gpu-probe, built there with nvcc;
#  (b) the new timing-attack fixtures (fixtures/hacks/timing) scored by the v1 protocol's
#      release CLI (.gpu/cudaperf-v1, built from commit bd9373e), to see them get through.
# Logs go to $OUT.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/nvidia/lib64:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
log="$OUT/v1-attacks-and-probes.log"
{
echo "# $(date -u) $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader)"
nvidia-smi -q | grep -i -E "addressing|persistence|compute mode" || true
echo "## probes"
cd tools/gpu-probe
nvcc -cubin -arch=sm_90 -o /tmp/k.cubin kernels.cu && g++ -O2 -o /tmp/probe probe.cpp -I/usr/local/cuda/include -L/usr/local/cuda/lib64/stubs -lcuda \
  && timeout 60 /tmp/probe main /tmp/k.cubin; timeout 30 /tmp/probe hmm /tmp/k.cubin
cd ../..
echo "## timing-attack fixtures under protocol v1 (reward kevin: 0.3*correct + speedup)"
# v1 knows no `flops` field: score against a copy of the tasks without it.
rm -rf /tmp/v1tasks && cp -r fixtures/tasks /tmp/v1tasks && sed -i '/^flops = /d' /tmp/v1tasks/*/task.toml
export CUDAPERF_WORKER=$PWD/.gpu/cudaperf-v1
mkdir -p /tmp/v1json
printf '%-40s %-10s %10s %10s %10s %8s %s\n' fixture verdict ref_us cand_us speedup implaus reasons
for f in fixtures/hacks/timing/*.cu; do
  case $(basename "$f") in matmul*) t=matmul;; softmax*) t=softmax_rows;; spmv*) t=spmv_csr;; esac
  timeout 240 .gpu/cudaperf-v1 score --task /tmp/v1tasks/$t "$f" --reward kevin --json > "/tmp/v1json/$(basename "$f" .cu).json" 2> "/tmp/v1json/$(basename "$f" .cu).err"
  python3 - "$f" "/tmp/v1json/$(basename "$f" .cu).json" <<'PY'
import json, sys
f, p = sys.argv[1], sys.argv[2]
try:
    d = json.load(open(p))
except Exception as e:
    print(f"{f.split('/')[-1]:<40} no report ({e})"); sys.exit()
s = d.get("stages", {})
c = s.get("correctness") or {}
t = s.get("timing") or {}
ex = (s.get("execute") or {}).get("status")
verdict = "correct" if c.get("passed") else ("incorrect" if c else ex)
reasons = "; ".join(r for k in c.get("configs", []) for r in k.get("reasons", []))[:120]
print(f"{f.split('/')[-1]:<40} {verdict:<10} {t.get('reference_us', 0) or 0:10.1f} {t.get('candidate_us', 0) or 0:10.1f} {t.get('speedup', 0) or 0:10.2f} {str(t.get('implausible')):>8} value={d.get('value')} {reasons}")
PY
done
tar czf "$OUT/v1-reports.tgz" -C /tmp v1json
} 2>&1 | tee "$log"
