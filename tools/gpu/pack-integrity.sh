#!/usr/bin/env bash
# Run HERE: packs .gpu/ for tools/gpu/integrity-verify.sh — the release `cudaperf` (also the
# sandbox worker), `gpu_bench`, and the release test binaries `gpu` and `originals`.
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
grep -qx '/.gpu/' .git/info/exclude 2>/dev/null || echo '/.gpu/' >> .git/info/exclude
json=$(cargo build --release --bin cudaperf --example gpu_bench --test gpu --test originals --message-format=json 2>/dev/null)
rm -rf .gpu && mkdir -p .gpu/bin
cp target/release/cudaperf target/release/examples/gpu_bench .gpu/
for t in gpu originals; do
  exe=$(printf '%s\n' "$json" | python3 -c '
import json, sys
name = sys.argv[1]
for l in sys.stdin:
    try: m = json.loads(l)
    except ValueError: continue
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m.get("profile", {}).get("test") and m["target"]["name"] == name: print(m["executable"])' "$t")
  cp "$exe" ".gpu/bin/$t"
done
strip .gpu/cudaperf .gpu/gpu_bench .gpu/bin/*
du -sh .gpu
