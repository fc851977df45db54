#!/usr/bin/env bash
# The blob mirror's cost: acquire+release cycles per second (distinct keys, 64
# connections) with --mirror off, async and sync against a real Azurite, and the mirror's
# lag under that load (sampled from /readyz every 200 ms). Loopback only.
#
#   bench/mirror.sh [SECONDS]      default 15 s per mode
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-15}
BUILD=${BUILD:-build}
[ -x "$BUILD/mutexd" ] && [ -x "$BUILD/loadgen" ] || make build >/dev/null
WORK=$(mktemp -d)
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    scripts/azurite.sh stop "$WORK/az" >/dev/null 2>&1 || true
    rm -rf "$WORK"
}
trap cleanup EXIT INT TERM

mkdir -p "$WORK/az"
scripts/azurite.sh install >/dev/null
scripts/azurite.sh start "$WORK/az" >/dev/null
CS=$(cat "$WORK/az/connection-string")
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

echo "| --mirror | cycles/s | requests/s | request p50 ms | p99 ms | lag max (changes) | lag max (ms) | lag after (changes) |"
echo "|---|---:|---:|---:|---:|---:|---:|---:|"
for mode in off async sync; do
    port=$(free_port)
    args=(--listen "127.0.0.1:$port" --data-dir "$WORK/data-$mode")
    [ "$mode" != off ] && args+=(--blob-connection-string "$CS" --blob-container "bench-$mode" --mirror "$mode")
    "$BUILD/mutexd" "${args[@]}" > "$WORK/mutexd-$mode.log" 2>&1 &
    srv=$!
    pids+=("$srv")
    for _ in $(seq 1 100); do curl -s -o /dev/null "http://127.0.0.1:$port/healthz" && break; sleep 0.1; done
    # Sample the lag while the load runs.
    ( while :; do curl -s "http://127.0.0.1:$port/readyz"; echo; sleep 0.2; done ) > "$WORK/lag-$mode" 2>/dev/null &
    sampler=$!
    "$BUILD/loadgen" --target mutexd --port "$port" --scenario distinct --connections 64 \
        --duration "$SECS" --warmup 2 --json > "$WORK/load-$mode.json"
    sleep 1
    kill "$sampler" 2>/dev/null || true
    after=$(curl -s "http://127.0.0.1:$port/readyz")
    python3 - "$mode" "$WORK/load-$mode.json" "$WORK/lag-$mode" "$after" <<'PY'
import json, sys
mode, load, lag, after = sys.argv[1], json.load(open(sys.argv[2])), sys.argv[3], sys.argv[4]
lags = [json.loads(l).get("mirror", {}) for l in open(lag) if l.strip().startswith("{")]
mc = max([x.get("lag_changes", 0) for x in lags] or [0])
mm = max([x.get("lag_ms", 0) for x in lags] or [0])
la = json.loads(after).get("mirror", {}).get("lag_changes", "-") if mode != "off" else "-"
req = load.get("latency", {}).get("request", {})
def ms(v): return "%.2f" % v if isinstance(v, (int, float)) else "-"
print("| %s | %.0f | %.0f | %s | %s | %s | %s | %s |" % (
    mode, load["cycles_per_s"], load["requests_per_s"], ms(req.get("p50_ms")),
    ms(req.get("p99_ms")), mc if mode != "off" else "-", mm if mode != "off" else "-", la))
PY
    kill -TERM "$srv"
    wait "$srv" || true
done
