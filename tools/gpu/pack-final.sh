#!/usr/bin/env bash
# Run HERE: packs .gpu/ for tools/gpu/final-verify.sh — the release `cudaperf` (also the
# sandbox worker), `gpu_bench`, the release GPU test binary, and Debian's redis-server with
# the libraries it needs beyond glibc (tools/gpu-serve-pack.sh's recipe).
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
cargo build --release --bin cudaperf --example gpu_bench
exe=$(cargo test --release --test gpu --no-run --message-format=json 2>/dev/null | python3 -c '
import json, sys
for l in sys.stdin:
    try: m = json.loads(l)
    except ValueError: continue
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m.get("profile", {}).get("test"): print(m["executable"])')
rm -rf .gpu && mkdir -p .gpu/bin .gpu/redis/lib
cp target/release/cudaperf target/release/examples/gpu_bench .gpu/
cp "$exe" .gpu/bin/gpu
strip .gpu/cudaperf .gpu/gpu_bench .gpu/bin/gpu
real=$(readlink -f "$(command -v redis-server)")
cp "$real" .gpu/redis/redis-server && strip .gpu/redis/redis-server
ldd "$real" | awk '/=> \// {print $3}' | while read -r lib; do
    case "$(basename "$lib")" in
        libc.so*|libm.so*|libpthread.so*|libdl.so*|librt.so*|ld-linux*) ;;
        *) cp -L "$lib" .gpu/redis/lib/ ;;
    esac
done
redis-server --version > .gpu/redis/VERSION
du -sh .gpu
