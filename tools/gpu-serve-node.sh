#!/usr/bin/env bash
# Runs on the GPU machine, from the repository root, with .gpu-serve/ carried (made by
# tools/gpu-serve-pack.sh on the CPU machine). Two parts, each logged to
# $OUT/gpu-serve-node.log, with every answer as JSON beside it:
#   1. `cudaperf serve` in-process with the GPU stages; the Python client scores fixture
#      completions (tools/gpu_serve_client.py) for vector_add and softmax_rows.
#   2. If the carried redis-server starts: redis-server + `cudaperf serve --queue` + one
#      `cudaperf node` (GPU stages), the same completions through the queue.
#   usage: bash tools/gpu-serve-node.sh
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
OUT=${OUT:-$PWD/gpu-serve-out}
mkdir -p "$OUT"
LOG="$OUT/gpu-serve-node.log"
exec > >(tee -a "$LOG") 2>&1

BIN="$PWD/.gpu-serve/cudaperf"
[ -x "$BIN" ] || { echo "missing $BIN: run tools/gpu-serve-pack.sh on the CPU machine and carry .gpu-serve"; exit 1; }
export CUDAPERF_WORKER="$BIN" CARGO_MANIFEST_DIR="$PWD" CUDAPERF_LOG=info
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/nvidia/lib64:${LD_LIBRARY_PATH:-}
export PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}"

echo "== $(date -u +%Y-%m-%dT%H:%M:%SZ) $(hostname)"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || echo "nvidia-smi failed"
python3 --version
git log -1 --format='commit %H %s' 2>/dev/null || true

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# Starts "$@" in the background with stdout to $1.out; waits (bounded) for a line
# matching $2 on it; prints the PID.
wait_line() {  # FILE PATTERN SECONDS
    local i=0
    while [ $i -lt $(( $3 * 10 )) ]; do
        grep -q "$2" "$1" 2>/dev/null && return 0
        sleep 0.1; i=$((i + 1))
    done
    return 1
}

status=0
echo
echo "== part 1: cudaperf serve (in-process, GPU stages)"
"$BIN" serve --port 0 --tasks fixtures/tasks --workers 2 > "$OUT/serve-local.out" 2> "$OUT/serve-local.err" &
SERVE=$!
if wait_line "$OUT/serve-local.out" "listening on" 120; then
    URL=$(grep -o 'http://[^ ]*' "$OUT/serve-local.out" | head -1)
    echo "serve at $URL (pid $SERVE)"
    timeout 900 python3 tools/gpu_serve_client.py --url "$URL" --out "$OUT/local.json" || status=1
else
    echo "serve did not start:"; cat "$OUT/serve-local.err"; status=1
fi
kill -TERM $SERVE 2>/dev/null; timeout 120 tail --pid=$SERVE -f /dev/null; wait $SERVE; echo "serve exited with $?"
echo "-- serve log (last 30 lines)"; tail -n 30 "$OUT/serve-local.err"

echo
echo "== part 2: redis-server + cudaperf serve --queue + cudaperf node (GPU stages)"
REDIS=.gpu-serve/redis/redis-server
if [ ! -x "$REDIS" ]; then
    echo "SKIPPED: no carried redis-server in .gpu-serve/redis"
else
    RPORT=$(free_port); RDIR=$(mktemp -d)
    LD_LIBRARY_PATH="$PWD/.gpu-serve/redis/lib:$LD_LIBRARY_PATH" "$REDIS" --port "$RPORT" --bind 127.0.0.1 \
        --save "" --appendonly no --dir "$RDIR" > "$OUT/redis.out" 2>&1 &
    RPID=$!
    if ! wait_line "$OUT/redis.out" "Ready to accept connections" 30; then
        echo "SKIPPED: the carried redis-server did not start here:"; tail -n 20 "$OUT/redis.out"
        kill $RPID 2>/dev/null
    else
        Q="redis://127.0.0.1:$RPORT"
        echo "redis-server $(cat .gpu-serve/redis/VERSION 2>/dev/null) at $Q"
        "$BIN" node --queue "$Q" --tasks fixtures/tasks --name h200 > "$OUT/node.out" 2> "$OUT/node.err" &
        NODE=$!
        "$BIN" serve --port 0 --tasks fixtures/tasks --queue "$Q" > "$OUT/serve-queue.out" 2> "$OUT/serve-queue.err" &
        SERVE=$!
        if wait_line "$OUT/serve-queue.out" "listening on" 60 && wait_line "$OUT/node.out" "consuming" 60; then
            URL=$(grep -o 'http://[^ ]*' "$OUT/serve-queue.out" | head -1)
            echo "serve at $URL, node pid $NODE"
            timeout 900 python3 tools/gpu_serve_client.py --url "$URL" --out "$OUT/queue.json" || status=1
        else
            echo "serve or node did not start"; cat "$OUT/serve-queue.err" "$OUT/node.err"; status=1
        fi
        kill -TERM $SERVE $NODE 2>/dev/null
        timeout 120 tail --pid=$SERVE -f /dev/null; timeout 120 tail --pid=$NODE -f /dev/null
        echo "-- node log (last 30 lines)"; tail -n 30 "$OUT/node.err"
        kill $RPID 2>/dev/null; wait $RPID 2>/dev/null
    fi
fi
echo
echo "== done (status $status); log: $LOG"
exit $status
