#!/usr/bin/env bash
# Run HERE (the build machine) before a GPU run: packs into .gpu/ (git-ignored) what the other
# scripts of tools/gpu/ run on the GPU machine, which has no Rust toolchain: the release
# `cudaperf` (also the sandbox worker), the `gpu_bench` example, the release test binaries
# `gpu`, `gpu_torch` and `originals` in .gpu/bin/, and, when redis-server is installed here, Debian's
# redis-server with the libraries it needs beyond glibc in .gpu/redis/ (for
# tools/gpu-serve-node.sh's queue part).
#   usage: bash tools/gpu/pack.sh
#   then carry .gpu to the GPU machine and run verify.sh, bench.sh, measure.sh or dataset.sh.
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
json=$(cargo build --release --bin cudaperf --example gpu_bench --test gpu --test gpu_torch --test originals \
    --message-format=json 2>/dev/null)
rm -rf .gpu && mkdir -p .gpu/bin
cp target/release/cudaperf target/release/examples/gpu_bench .gpu/
for t in gpu gpu_torch originals; do
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
if command -v redis-server >/dev/null 2>&1; then
  mkdir -p .gpu/redis/lib
  real=$(readlink -f "$(command -v redis-server)")
  cp "$real" .gpu/redis/redis-server && strip .gpu/redis/redis-server
  ldd "$real" | awk '/=> \// {print $3}' | while read -r lib; do
    case "$(basename "$lib")" in
      libc.so*|libm.so*|libpthread.so*|libdl.so*|librt.so*|ld-linux*) ;;
      *) cp -L "$lib" .gpu/redis/lib/ ;;
    esac
  done
  redis-server --version > .gpu/redis/VERSION
fi
du -sh .gpu
