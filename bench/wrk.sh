#!/usr/bin/env bash
# bench/wrk.sh: acquire -> release cycles against a running mutexd, measured by wrk, a load
# generator this project did not write (a check on bench/loadgen's figures).
#
#   bench/wrk.sh --port PORT [--connections N] [--duration S] [--ttl-ms MS]
#
# One wrk thread per connection, each connection on its own key (bench/wrk/cycle.lua), so
# each is a closed loop of one request at a time, as loadgen's distinct scenario. Prints
# key value lines: wrk_cycles, wrk_failures, wrk_seconds, wrk_cycles_per_s,
# wrk_requests_per_s, wrk_request_p50_ms, wrk_request_p99_ms. wrk is installed from Debian
# (package wrk) when missing.
set -euo pipefail

PORT='' CONNECTIONS=64 DURATION=10 TTL_MS=15000
while (($#)); do
    case $1 in
    --port) PORT=$2; shift 2 ;;
    --connections) CONNECTIONS=$2; shift 2 ;;
    --duration) DURATION=$2; shift 2 ;;
    --ttl-ms) TTL_MS=$2; shift 2 ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "wrk.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
done
[[ $PORT =~ ^[0-9]+$ ]] || { echo "wrk.sh: --port is required" >&2; exit 2; }
[[ $CONNECTIONS =~ ^[0-9]+$ && $CONNECTIONS -ge 1 ]] || { echo "wrk.sh: bad --connections" >&2; exit 2; }

if ! command -v wrk >/dev/null; then
    sudo=()
    [[ $(id -u) -eq 0 ]] || sudo=(sudo -n)
    "${sudo[@]}" apt-get update -qq
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends wrk >/dev/null
fi

cd "$(dirname "$0")"
prefix=wrk-$$-$RANDOM
# wrk's -d takes whole seconds.
secs=$(awk -v d="$DURATION" 'BEGIN { s = int(d + 0.5); print (s < 1 ? 1 : s) }')
wrk -t"$CONNECTIONS" -c"$CONNECTIONS" -d"${secs}s" --timeout 10s -s wrk/cycle.lua \
    "http://127.0.0.1:$PORT" -- "$prefix" "$TTL_MS" | grep '^wrk_'
