#!/usr/bin/env bash
# Semaphores and shared leases under load, with bench/loadgen. Loopback only.
#
#   bench/semaphores.sh [SECONDS [REPS]]    default 10 s per run, 3 repetitions
#
# 1. Acquire -> release cycles on one counting semaphore of limit 64 from 64 connections
#    (every acquire fits: what a semaphore's bookkeeping costs on one hot resource), against
#    mutexd (durable, its default) and Redis with appendonly yes + appendfsync always and a
#    Lua semaphore (a sorted set of holders scored by deadline: bench/loadgen.c), as
#    bench/compare.sh runs Redis; the two alternate, REPS times.
# 2. Whether many holders on one resource cost the others anything: mutexd's distinct x64
#    (acquire -> release, each connection on its own key) alone, and beside 1,000 background
#    holders renewing at a third of a 6 s TTL (about 500 renewals/s), in three shapes: 1,000
#    exclusive leases on 1,000 resources (the same work spread out), 1,000 holders of one
#    semaphore of limit 1,000, and 1,000 shared leases of one resource. The server runs with
#    --max-holders 2048; the shapes alternate, REPS times.
# Each row also gives the server's CPU time per lease operation in the measured window (for
# mutexd counted from its /metrics, background holders' renewals included), which noise from
# other work on the machine moves less than throughput.
# Prints a Markdown report (commit, machine, load average) and writes it to
# bench/results/semaphores-<date>.md. Needs redis-server (Debian: redis-server).
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-10}
REPS=${2:-3}
BUILD=${BUILD:-build}
if [ ! -x "$BUILD/mutexd" ] || [ ! -x "$BUILD/loadgen" ]; then make build >/dev/null; fi
command -v redis-server >/dev/null || {
    echo "semaphores.sh: needs redis-server (apt-get install redis-server)" >&2
    exit 1
}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/mutexd-semaphores.XXXXXX")
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
    rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
up() { # command...
    local _
    for _ in $(seq 1 100); do "$@" >/dev/null 2>&1 && return 0; sleep 0.1; done
    echo "semaphores.sh: a server did not come up" >&2
    exit 1
}
CLK_TCK=$(getconf CLK_TCK)
ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; } # a process's CPU time, clock ticks
# Lease operations mutexd has done (grants, renewals, releases), from /metrics.
mutexd_ops() {
    curl -s "http://127.0.0.1:$MPORT/metrics" |
        awk '/^mutexd_(grants|renewals|releases)_total / { s += $2 } END { print s + 0 }'
}

# measure LABEL OUT PID TARGET LOADGEN-ARGS...: one measured run of loadgen against the
# server PID, with the server's CPU time over the measured window (after the 2 s warm-up)
# divided by the lease operations it did in that window (for mutexd from its /metrics, so
# background holders count; for Redis, loadgen's own requests); prints the table's row.
measure() {
    local label=$1 out=$2 pid=$3 target=$4 lgpid c0 c1 o0 o1
    shift 4
    "$BUILD/loadgen" --target "$target" --duration "$SECS" --warmup 2 --json "$@" >"$out" &
    lgpid=$!
    sleep 2
    c0=$(ticks "$pid") o0=$([[ $target == mutexd ]] && mutexd_ops || echo 0)
    sleep "$SECS"
    c1=$(ticks "$pid") o1=$([[ $target == mutexd ]] && mutexd_ops || echo 0)
    wait "$lgpid"
    python3 - "$label" "$out" "$((c1 - c0))" "$((o1 - o0))" "$CLK_TCK" <<'PY'
import json, sys
label, d = sys.argv[1], json.load(open(sys.argv[2]))
ticks, ops, hz = int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
ops = ops or d["requests"]
lat = d.get("latency", {})
errs = sum(d.get("errors", {}).values())
print("| %s | %.0f | %.0f | %.2f | %.2f | %s | %.0f | %s |" % (
    label, d["cycles_per_s"], d["requests_per_s"], lat["cycle"]["p50_ms"],
    lat["cycle"]["p99_ms"], errs, ticks / hz * 1e6 / ops if ops else 0,
    open("/proc/loadavg").read().split()[0]))
PY
}

MPORT=$(free_port)
mkdir -p "$WORK/mutexd" "$WORK/redis"
"$BUILD/mutexd" --listen "127.0.0.1:$MPORT" --data-dir "$WORK/mutexd" --max-holders 2048 \
    2>"$WORK/mutexd.log" &
pids+=($!)
MPID=$!
RPORT=$(free_port)
redis-server --port "$RPORT" --bind 127.0.0.1 --protected-mode yes --dir "$WORK/redis" \
    --save '' --appendonly yes --appendfsync always --daemonize no \
    --logfile "$WORK/redis.log" &
pids+=($!)
RPID=$!
up curl -sf "http://127.0.0.1:$MPORT/healthz"
up redis-cli -h 127.0.0.1 -p "$RPORT" ping

cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')
mem=$(awk '/MemTotal/ { printf "%.1f GiB", $2 / 1048576 }' /proc/meminfo)
{
    echo "commit \`$(git rev-parse --short HEAD)\` · $(date -u '+%Y-%m-%d %H:%M UTC') ·" \
        "$(nproc) cores, $mem, $(uname -sr), ${cpu:-unknown CPU}; $(redis-server --version |
            sed -n 's/.*v=\([0-9.]*\).*/Redis \1/p')"
    echo
    echo "Load average before the runs: $(cut -d' ' -f1-3 /proc/loadavg)."
    echo
    echo "### A semaphore of limit 64, 64 connections, acquire -> release (${SECS} s runs)"
    echo
    echo "| system, repetition | cycles/s | requests/s | cycle p50 ms | cycle p99 ms | errors | server µs/op | load (1 min) |"
    echo "|---|---:|---:|---:|---:|---:|---:|---:|"
} | tee "$WORK/report.md"

for r in $(seq 1 "$REPS"); do
    measure "mutexd (fsync) #$r" "$WORK/sem-m-$r.json" "$MPID" mutexd --port "$MPORT" \
        --scenario distinct --connections 64 --limit 64 | tee -a "$WORK/report.md"
    measure "Redis, AOF fsync always, Lua #$r" "$WORK/sem-r-$r.json" "$RPID" redis \
        --port "$RPORT" --scenario distinct --connections 64 --limit 64 |
        tee -a "$WORK/report.md"
done

{
    echo
    echo "### mutexd's distinct ×64 beside 1,000 background holders (${SECS} s runs)"
    echo
    echo "| background, repetition | cycles/s | requests/s | cycle p50 ms | cycle p99 ms | errors | server µs/op | load (1 min) |"
    echo "|---|---:|---:|---:|---:|---:|---:|---:|"
} | tee -a "$WORK/report.md"
shapes=("none|" "1,000 exclusive, 1,000 resources|" "1,000 holders of one semaphore|--limit 1000"
    "1,000 shared leases of one resource|--shared")
for r in $(seq 1 "$REPS"); do
    for k in "${!shapes[@]}"; do
        s=${shapes[$k]}
        label=${s%%|*} args=${s#*|}
        bg=
        if [[ $label != none ]]; then
            # shellcheck disable=SC2086 # args is a list of arguments
            "$BUILD/loadgen" --target mutexd --port "$MPORT" --scenario hold --connections 1000 \
                --ttl-ms 6000 --renews 1000000 --duration $((SECS + 30)) --warmup 0 \
                --key-prefix "bg$r" $args --json >"$WORK/bg-$r-$k.json" 2>&1 &
            bg=$!
            pids+=("$bg")
            sleep 4 # every holder has its lease and renews
        fi
        holders=$(curl -s "http://127.0.0.1:$MPORT/metrics" |
            awk '/^mutexd_leases_held / { print $2 }')
        measure "$label ($holders held) #$r" "$WORK/iso-$r-$k.json" "$MPID" mutexd \
            --port "$MPORT" --scenario distinct --connections 64 | tee -a "$WORK/report.md"
        if [[ -n $bg ]]; then
            kill -INT "$bg" 2>/dev/null || true
            wait "$bg" 2>/dev/null || true
        fi
    done
done
{
    echo
    echo "Load average after the runs: $(cut -d' ' -f1-3 /proc/loadavg)."
} | tee -a "$WORK/report.md"
mkdir -p bench/results
cp "$WORK/report.md" "bench/results/semaphores-$(date -u +%Y-%m-%d-%H%M%S).md"
