#!/usr/bin/env bash
# Run HERE (the CPU machine) before the GPU run: packs into .gpu-serve/ (git-ignored) what
# tools/gpu-serve-node.sh needs on the GPU machine, which has no Rust toolchain and no
# internet: the release `cudaperf` binary, and Debian's redis-server binary with the shared
# libraries it needs beyond glibc (from `apt-get install redis-server`), so that the
# serve + node run over Redis can happen there too.
#   usage: bash tools/gpu-serve-pack.sh
#   then (the lead): device run with carry [".gpu-serve"] and command
#         "bash tools/gpu-serve-node.sh"
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
cargo build --release --bin cudaperf
rm -rf .gpu-serve && mkdir -p .gpu-serve/redis/lib
cp target/release/cudaperf .gpu-serve/cudaperf
strip .gpu-serve/cudaperf 2>/dev/null || true
if ! command -v redis-server >/dev/null 2>&1; then
    apt-get install -y -qq redis-server >/dev/null 2>&1 || echo "no redis-server: the GPU run will skip the queue part"
fi
if command -v redis-server >/dev/null 2>&1; then
    real=$(readlink -f "$(command -v redis-server)")
    # Debian's redis-server is a link to redis-check-rdb; the program picks its role from
    # its name, so the copy must be called redis-server.
    cp "$real" .gpu-serve/redis/redis-server
    strip .gpu-serve/redis/redis-server 2>/dev/null || true
    ldd "$real" | awk '/=> \// {print $3}' | while read -r lib; do
        case "$(basename "$lib")" in
            libc.so*|libm.so*|libpthread.so*|libdl.so*|librt.so*|ld-linux*) ;;
            *) cp -L "$lib" .gpu-serve/redis/lib/ ;;
        esac
    done
    redis-server --version > .gpu-serve/redis/VERSION
fi
du -sh .gpu-serve | awk '{print "packed .gpu-serve/: " $1 " (the device tool carries at most 64 MiB)"}'
