#!/usr/bin/env bash
# GPU machine, repository root, .gpu carried (tools/gpu/pack.sh): the GPU tests (hostile and
# reward-hack verdicts, timing and integrity attacks alone and in group jobs, timeouts by
# cause, runner isolation, schedules, the compute floor, every reference against its
# original) and the originals' GPU test. With PROBES=1 first the probes of tools/gpu-probe
# (isolation between contexts, round-trip cost, shared/local memory left between launches),
# built there with nvcc.
#   TESTS: test name filters for the gpu tests (default: all); *_S: time limits in seconds.
#   Logs: $OUT/gpu-tests.log, $OUT/originals-tests.log, $OUT/probes.log.
set -u
source "$(dirname "$0")/common.sh"
if [ "${PROBES:-0}" = 1 ]; then
  { header "tools/gpu-probe: probe main/hmm, leftovers"
    (cd tools/gpu-probe \
      && nvcc -cubin -arch=sm_90 -o /tmp/k.cubin kernels.cu \
      && g++ -O2 -o /tmp/probe probe.cpp -I/usr/local/cuda/include -L/usr/local/cuda/lib64/stubs -lcuda \
      && timeout 60 /tmp/probe main /tmp/k.cubin; timeout 30 /tmp/probe hmm /tmp/k.cubin
      nvcc -O2 -arch=sm_90 -o /tmp/leftovers leftovers.cu && timeout 60 /tmp/leftovers)
  } > "$OUT/probes.log" 2>&1
  tail -20 "$OUT/probes.log"
fi
{ header ".gpu/bin/gpu --include-ignored --nocapture --test-threads=1 ${TESTS:-}"
  timeout "${TESTS_S:-300}" .gpu/bin/gpu --include-ignored --nocapture --test-threads=1 ${TESTS:-}
  echo "exit status $?"
} > "$OUT/gpu-tests.log" 2>&1
grep -E "^test |test result|FAILED|panicked" "$OUT/gpu-tests.log" | head -40
{ header ".gpu/bin/originals --include-ignored --nocapture"
  timeout "${ORIG_S:-300}" .gpu/bin/originals --include-ignored --nocapture
  echo "exit status $?"
} > "$OUT/originals-tests.log" 2>&1
grep -E "^test |test result|FAILED|panicked" "$OUT/originals-tests.log" | head -20
