#!/usr/bin/env bash
# bench/ha.sh: a server group (--ha) of three on loopback over one fresh Azurite container:
# how long a takeover takes, and what standbys cost in throughput.
#
#   bench/ha.sh            20 SIGKILL takeovers, 20 SIGTERM handovers, then throughput:
#                          3 repetitions x (one --ha server alone, the active of a group of
#                          three, a standby of it, the group's URLs with a standby's first
#                          followed to the active its answers name) x (16, 64 connections),
#                          10 s each after 2 s of warm-up (about 10 minutes)
#   bench/ha.sh --quick    5 rounds each, 1 repetition of 3 s: a smoke test (about 1 minute)
#
# Takeover after SIGKILL: each round finds the active (every server names it in
# GET /v1/servers), kills it, and times from the kill to the first acquire of a new resource
# answered 200 through a standby (one client per standby, a new attempt 10 ms after any other
# answer), then starts the killed server again on its port, as a standby, and waits until the
# three agree. Handover on SIGTERM: the same with SIGTERM; the old active must exit 0. The
# group holds 1,000 leases (TTL 1 h) before the first round, so that a takeover has a
# journal to read. Throughput: bench/loadgen, distinct keys (acquire + release), the
# configurations alternating in order between repetitions, each on a fresh container.
#
# Writes bench/results/ha-<date>.md (printed at the end) and .json (every figure), with the
# commit, the machine and its load, and keeps the servers' logs of the takeover rounds in
# bench/results/ha-<date>-logs/. Azurite (scripts/azurite.sh) and every server are
# stopped on exit, on failure and on Ctrl-C. Needs python3, node and npm (for Azurite).
# BUILD (default: build) is where mutexd and loadgen are; they are built when missing.
# HA_ROUNDS, HA_REPS, HA_SECONDS override the counts above.
set -euo pipefail

usage() {
    sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'
}

QUICK=0
for arg in "$@"; do
    case $arg in
    --quick) QUICK=1 ;;
    -h | --help) usage; exit 0 ;;
    *) echo "ha.sh: unknown argument $arg (see --help)" >&2; exit 2 ;;
    esac
done

cd "$(dirname "$0")/.."
ROOT=$PWD
BUILD=${BUILD:-build}
if ((QUICK)); then
    ROUNDS=${HA_ROUNDS:-5} REPS=${HA_REPS:-1} SECONDS_EACH=${HA_SECONDS:-3} WARMUP=0.5
else
    ROUNDS=${HA_ROUNDS:-20} REPS=${HA_REPS:-3} SECONDS_EACH=${HA_SECONDS:-10} WARMUP=2
fi

die() {
    echo "ha.sh: $*" >&2
    exit 1
}

WORK=$(mktemp -d "${TMPDIR:-/tmp}/mutexd-ha.XXXXXX")
STAMP=$(date -u +%Y-%m-%d-%H%M%S)
RESULTS=$ROOT/bench/results
OUT=$RESULTS/ha-$STAMP
PY_PID=

cleanup() {
    local rc=$?
    trap - EXIT INT TERM
    if [[ -n $PY_PID ]]; then # it stops its own servers on SIGTERM
        kill -TERM "$PY_PID" 2>/dev/null || true
        wait "$PY_PID" 2>/dev/null || true
    fi
    scripts/azurite.sh stop "$WORK/az" >/dev/null 2>&1 || true
    rm -rf "$WORK"
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

command -v python3 >/dev/null || die "python3 is needed"
[[ -x $BUILD/mutexd ]] || make build
[[ -x $BUILD/loadgen ]] || cmake --build "$BUILD" -j2 --target loadgen
[[ -x $BUILD/mutexd && -x $BUILD/loadgen ]] || die "no $BUILD/mutexd or $BUILD/loadgen"
mkdir -p "$RESULTS" "$WORK/az"

scripts/azurite.sh install >/dev/null
scripts/azurite.sh start "$WORK/az" >/dev/null
CS=$(cat "$WORK/az/connection-string")

# Runs bench/ha_group.py in the background, so that a signal to this script reaches it.
group() {
    python3 bench/ha_group.py "$@" --bin "$BUILD/mutexd" --loadgen "$BUILD/loadgen" \
        --connection-string "$CS" &
    PY_PID=$!
    wait "$PY_PID"
    PY_PID=
}

# Total and steal ticks from /proc/stat (for the CPU steal during the runs).
cpu_ticks() {
    awk '/^cpu / { print $2 + $3 + $4 + $5 + $6 + $7 + $8 + $9, $9 }' /proc/stat
}

load() { # the load averages, as uptime prints them
    sed 's/^.*load average: //' <(uptime)
}

echo "mutexd group benchmark: $ROUNDS rounds, $REPS repetitions of $SECONDS_EACH s"
LOAD_START=$(load)
TICKS_START=$(cpu_ticks)
echo "load average at the start: $LOAD_START"

echo "takeover after SIGKILL"
group takeover --signal KILL --rounds "$ROUNDS" --json "$WORK/kill.json" --logs "$OUT-logs/kill"
LOAD_KILL=$(load)
echo "handover on SIGTERM"
group takeover --signal TERM --rounds "$ROUNDS" --json "$WORK/term.json" --logs "$OUT-logs/term"
LOAD_TERM=$(load)
echo "throughput"
group throughput --reps "$REPS" --seconds "$SECONDS_EACH" --warmup "$WARMUP" \
    --connections 16,64 --json "$WORK/throughput.json"
LOAD_END=$(load)
TICKS_END=$(cpu_ticks)

STEAL=$(awk -v a="$TICKS_START" -v b="$TICKS_END" 'BEGIN { split(a, x, " "); split(b, y, " ");
    t = y[1] - x[1]; printf "%.1f", (t > 0 ? 100 * (y[2] - x[2]) / t : 0) }')
BUILD_TYPE=$(sed -n 's/^CMAKE_BUILD_TYPE:[A-Z]*=//p' "$BUILD/CMakeCache.txt" 2>/dev/null || true)
python3 bench/ha_group.py report --json "$OUT.json" --md "$OUT.md" \
    --inputs "$WORK/kill.json" "$WORK/term.json" "$WORK/throughput.json" \
    --meta commit="$(git rev-parse --short HEAD 2>/dev/null || echo unknown)" \
    date="$(date -u '+%Y-%m-%d %H:%M UTC')" \
    machine="$(nproc) cores, $(awk '/MemTotal/ { printf "%.1f GiB", $2 / 1048576 }' /proc/meminfo), $(uname -sr), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')" \
    version="$("$BUILD/mutexd" --version 2>/dev/null | head -1 | awk '{print $NF}')" \
    build="${BUILD_TYPE:-unknown}" steal="$STEAL" quick="$QUICK" \
    load_start="$LOAD_START" load_kill="$LOAD_KILL" load_term="$LOAD_TERM" load_end="$LOAD_END"
echo
cat "$OUT.md"
echo
echo "written: ${OUT#"$ROOT"/}.md, .json, -logs/"
