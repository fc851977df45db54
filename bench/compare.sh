#!/usr/bin/env bash
# bench/compare.sh: mutexd against Redis and etcd used as lease/lock services, on this machine,
# with the same load generator (bench/loadgen) and the same scenarios, back to back.
#
#   bench/compare.sh           full run: each scenario 3 times, 10 s a run after 2 s of
#                              warm-up, then a million held leases and 10,000 idle
#                              connections (about 25 minutes); writes docs/benchmarks.md's
#                              generated section (the headline tables), bench/NOTES.md's
#                              (the whole report) and docs/benchmarks-compare.png
#   bench/compare.sh --quick   twice, 3 s a run after 0.5 s, 100,000 leases, 2,000 idle
#                              connections: a smoke test (about 5 minutes); writes only
#                              bench/results
#   REPS_OVERRIDE=N            that many repetitions instead
#
# It starts, each on free loopback ports with its own temporary data directory:
#   mutexd   durable, its default: every answered change is fsynced
#   Redis    appendonly yes, appendfsync always, no RDB snapshots    ("Redis fsync")
#   Redis    no persistence at all                                    ("Redis in memory")
#   etcd     one member; its WAL is fsynced on every commit
# runs every scenario against each in turn (mutexd, Redis fsync, Redis in memory, etcd, and
# again, REPS times), reading each server's context switches and CPU time from /proc around
# every measured window, and the disk's fsync latency before each scenario; after loadgen's
# distinct runs, the same servers are measured by tools this project did not write: wrk
# (bench/wrk.sh) against mutexd, redis-benchmark against Redis fsync. It stops all of them on
# exit, on failure and on Ctrl-C. Then, on mutexd alone: how late a waiter is granted after the holder's TTL (idle,
# and under the distinct ×64 load), a server filled with held leases (memory per lease,
# and the time a SIGKILLed server takes to be ready again with all of them), and a server
# holding 10,000 idle keep-alive connections (bench/idle_conns.py: memory per connection,
# and a request's latency while they are held). Results:
# bench/results/compare-<date>.md (printed at the end), .png (bar chart) and .json (every
# run's loadgen output, and the idle connections' figures); a full run also puts the report
# between the markers in bench/NOTES.md, its headline tables (cycles/s, latency, expiry,
# held leases, idle connections, targets) between those in docs/benchmarks.md, and the
# chart in docs/benchmarks-compare.png.
#
# What is missing is installed from Debian: redis-server, etcd-server, gnuplot-nox, jq, curl, wrk.
# The idle connections need a hard limit of open files above 10,000 (ulimit -Hn) or the
# privilege to raise it; without either, the run stops before it starts.
# MUTEXD_* variables in the environment reach every mutexd it starts (MUTEXD_THREADS=1,
# say), and the report names them.
# BUILD (default: build) is where mutexd and loadgen are built; mutexd is built with
# `make build` when missing, loadgen is compiled here when missing or older than its sources.
set -euo pipefail

usage() {
    sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'
}

QUICK=0
for arg in "$@"; do
    case $arg in
    --quick) QUICK=1 ;;
    -h | --help) usage; exit 0 ;;
    *) echo "compare.sh: unknown argument $arg (see --help)" >&2; exit 2 ;;
    esac
done

cd "$(dirname "$0")/.."
ROOT=$PWD
BUILD=${BUILD:-build}
if ((QUICK)); then
    DURATION=3 WARMUP=0.5 PING_DURATION=2 LEASES=100000 IDLE_CONNS=2000 REPS=2
else
    DURATION=10 WARMUP=2 PING_DURATION=5 LEASES=1000000 IDLE_CONNS=10000 REPS=3
fi
REPS=${REPS_OVERRIDE:-$REPS}
CLK_TCK=$(getconf CLK_TCK)

# ------------------------------------------------------------------ scenarios and systems

# id | label | loadgen arguments
SCENARIOS=(
    "distinct64|distinct ×64|--scenario distinct --connections 64"
    "distinct1|distinct ×1|--scenario distinct --connections 1"
    "hotkey64|hot key ×64|--scenario hotkey --connections 64"
    "renew64|renew ×64|--scenario renew --connections 64 --renews 3"
    "mixed|mixed ×256|--scenario mixed --connections 256 --holders 192 --hot-keys 4 --ttl-ms 3000"
)
# The ceiling of the load generator itself against each server: requests that do nothing
# (GET /healthz, PING, GET /health). The lease runs should stay well below it.
PING="ping|no-op ×64|--scenario ping --connections 64"
# One connection's round trip with nothing behind it: with one fdatasync, the floor under a
# hot key's hand-off (the next holder's release can leave only once its grant has come).
PING1="ping1|no-op ×1|--scenario ping --connections 1"
# id | label | loadgen target
SYSTEMS=(
    "mutexd|mutexd (fsync)|mutexd"
    "redis-fsync|Redis, AOF fsync always|redis"
    "redis-mem|Redis, in memory|redis"
    "etcd|etcd, one member|etcd"
)

# ------------------------------------------------------------------ cleanup

WORK=$(mktemp -d "${TMPDIR:-/tmp}/mutexd-compare.XXXXXX")
declare -a PIDS=()
declare -A PORT=() PID_OF=()
LG_PID=
FAILED=0
STAMP=$(date -u +%Y-%m-%d-%H%M%S)
RESULTS=$ROOT/bench/results
OUT=$RESULTS/compare-$STAMP

stop_pid() {
    local pid=$1 i
    kill -TERM "$pid" 2>/dev/null || return 0
    for ((i = 0; i < 100; i++)); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
}

cleanup() {
    local rc=$?
    trap - EXIT INT TERM
    [[ -n $LG_PID ]] && stop_pid "$LG_PID"
    for pid in "${PIDS[@]}"; do stop_pid "$pid"; done
    if ((rc != 0 || FAILED)) && [[ -d $WORK ]]; then
        mkdir -p "$OUT-logs"
        cp "$WORK"/*.log "$WORK"/runs/*.err "$OUT-logs/" 2>/dev/null || true
        echo "compare.sh: logs kept in ${OUT#"$ROOT"/}-logs/" >&2
    fi
    rm -rf "$WORK"
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

die() {
    echo "compare.sh: $*" >&2
    exit 1
}

# ------------------------------------------------------------------ tools

install_missing() {
    local need=()
    command -v redis-server >/dev/null || need+=(redis-server)
    command -v redis-cli >/dev/null || need+=(redis-tools)
    command -v etcd >/dev/null || need+=(etcd-server)
    command -v gnuplot >/dev/null || need+=(gnuplot-nox)
    command -v jq >/dev/null || need+=(jq)
    command -v curl >/dev/null || need+=(curl)
    command -v cc >/dev/null || need+=(gcc)
    command -v wrk >/dev/null || need+=(wrk)
    ((${#need[@]})) || return 0
    local sudo=()
    [[ $(id -u) -eq 0 ]] || sudo=(sudo -n)
    echo "installing: ${need[*]}"
    "${sudo[@]}" apt-get update -qq
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        "${need[@]}" >/dev/null
}

build_tools() {
    MUTEXD=$BUILD/mutexd
    [[ -x $MUTEXD ]] || make build
    [[ -x $MUTEXD ]] || die "no $MUTEXD after make build"
    # shellcheck source=bench/loadgen-path.sh
    . bench/loadgen-path.sh
    loadgen_path "$BUILD" "$WORK"
}

# The idle connections need as many open files, in their server and in bench/idle_conns.py:
# a hard limit below that which cannot be raised ends the run before it starts.
check_nofile() {
    local hard nofile=$((IDLE_CONNS + 256))
    hard=$(ulimit -Hn)
    [[ $hard == unlimited ]] || ((hard >= nofile)) || (ulimit -n "$nofile") 2>/dev/null ||
        die "the hard limit of open files is $hard; $(num "$IDLE_CONNS") idle connections" \
            "need $nofile (ulimit -Hn)"
}

# ------------------------------------------------------------------ servers

# Sets the variable named $1 to a port below the ephemeral range that nothing listens on.
declare -a TAKEN=()
free_port() {
    local p i
    for ((i = 0; i < 200; i++)); do
        p=$((20000 + RANDOM % 12000))
        [[ " ${TAKEN[*]} " == *" $p "* ]] && continue
        if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
            TAKEN+=("$p")
            printf -v "$1" %s "$p"
            return 0
        fi
    done
    die "no free port found"
}

wait_for() { # description, seconds, command...
    local what=$1 secs=$2 i
    shift 2
    for ((i = 0; i < secs * 10; i++)); do
        "$@" >/dev/null 2>&1 && return 0
        sleep 0.1
    done
    die "$what did not come up; see its log"
}

# The MUTEXD_* variables the servers inherit (secrets left out), or "its defaults".
server_settings() {
    local vars
    vars=$(env | grep -E '^MUTEXD_[A-Z_]+=' |
        grep -vE '^MUTEXD_(BIN|BLOB_CONNECTION_STRING|AUTH_TOKENS_FILE)=' | sort | tr '\n' ' ') || true
    if [[ -n $vars ]]; then
        echo "from the environment, ${vars% }; the rest its defaults"
    else
        echo "its defaults"
    fi
}

start_mutexd() {
    mkdir -p "$WORK/mutexd"
    "$MUTEXD" --listen 127.0.0.1:0 --data-dir "$WORK/mutexd" 2>"$WORK/mutexd.log" &
    PIDS+=($!)
    PID_OF[mutexd]=$!
    wait_for mutexd 20 grep -q 'msg="started"' "$WORK/mutexd.log"
    PORT[mutexd]=$(grep -m1 'msg="started"' "$WORK/mutexd.log" |
        sed -n 's/.* address=127\.0\.0\.1:\([0-9]*\).*/\1/p')
    [[ -n ${PORT[mutexd]} ]] || die "mutexd: no address in its log"
}

start_redis() { # id, then extra redis-server arguments
    local id=$1 port
    shift
    free_port port
    mkdir -p "$WORK/$id"
    redis-server --port "$port" --bind 127.0.0.1 --protected-mode yes --dir "$WORK/$id" \
        --save '' --daemonize no --logfile "$WORK/$id.log" "$@" &
    PIDS+=($!)
    PID_OF[$id]=$!
    PORT[$id]=$port
    wait_for "$id" 20 redis-cli -h 127.0.0.1 -p "$port" ping
}

etcd_healthy() {
    curl -sf --noproxy '*' "http://127.0.0.1:$1/health" | grep -q '"health":"true"'
}

start_etcd() {
    local client peer
    free_port client
    free_port peer
    etcd --name compare --data-dir "$WORK/etcd" \
        --listen-client-urls "http://127.0.0.1:$client" \
        --advertise-client-urls "http://127.0.0.1:$client" \
        --listen-peer-urls "http://127.0.0.1:$peer" \
        --initial-advertise-peer-urls "http://127.0.0.1:$peer" \
        --initial-cluster "compare=http://127.0.0.1:$peer" --initial-cluster-state new \
        --logger zap --log-outputs stderr 2>"$WORK/etcd.log" &
    PIDS+=($!)
    PID_OF[etcd]=$!
    PORT[etcd]=$client
    wait_for etcd 30 etcd_healthy "$client"
}

# ------------------------------------------------------------------ runs

# The server's context switches (voluntary + nonvoluntary, summed over its threads) and CPU
# time (utime + stime, clock ticks): "switches ticks".
server_stat() {
    local pid=$1 sw
    sw=$(cat "/proc/$pid"/task/*/status 2>/dev/null |
        awk '/^(non)?voluntary_ctxt_switches/ { s += $2 } END { print s + 0 }')
    echo "$sw $(awk '{ print $14 + $15 }' "/proc/$pid/stat")"
}

# mutexd's own figures of its commits (/metrics): "commits records commit_s commit_step_s".
store_stat() { # port
    curl -sf --noproxy '*' "http://127.0.0.1:$1/metrics" | awk '
        $1 == "mutexd_store_commit_batch_size_count" { n = $2 }
        $1 == "mutexd_store_commit_batch_size_sum" { r = $2 }
        $1 == "mutexd_store_commit_seconds_sum" { c = $2 }
        $1 == "mutexd_store_fsync_seconds_sum" { f = $2 }
        END { print n + 0, r + 0, c + 0, f + 0 }'
}

# run_one scenario system-index duration rep: writes runs/<scenario>.<system>.<rep>.json, with
# the server's context switches and CPU time read from /proc at the start and the end of the
# measured window (after the warm-up), and the load average and CPU steal of that window.
run_one() {
    local sid slabel sargs yid ylabel ytarget duration=$3 r=$4
    IFS='|' read -r sid slabel sargs <<<"$1"
    IFS='|' read -r yid ylabel ytarget <<<"${SYSTEMS[$2]}"
    local base=$WORK/runs/$sid.$yid.$r rc=0 pid=${PID_OF[$yid]}
    local limit s0 s1 t0 t1 m0="0 0 0 0" m1="0 0 0 0"
    limit=$(awk -v d="$duration" -v w="$WARMUP" 'BEGIN { printf "%d", d + w + 30 }')
    printf '  %-12s %-26s ' "$sid#$r" "$ylabel"
    # shellcheck disable=SC2086 # sargs is a list of arguments
    timeout -k 5 "$limit" "$LOADGEN" --target "$ytarget" --port "${PORT[$yid]}" $sargs \
        --duration "$duration" --warmup "$WARMUP" --json >"$base.json" 2>"$base.err" &
    LG_PID=$!
    sleep "$WARMUP"
    s0=$(server_stat "$pid") t0=$(cpu_ticks)
    [[ $yid == mutexd ]] && m0=$(store_stat "${PORT[$yid]}")
    sleep "$duration"
    s1=$(server_stat "$pid") t1=$(cpu_ticks)
    [[ $yid == mutexd ]] && m1=$(store_stat "${PORT[$yid]}")
    wait "$LG_PID" || rc=$?
    LG_PID=
    if ((rc != 0)) || ! jq -e .cycles_per_s "$base.json" >/dev/null 2>&1; then
        echo "FAILED (exit $rc; $(head -c 200 "$base.err"))"
        rm -f "$base.json"
        FAILED=1
    else
        jq --argjson s0 "[${s0// /,}]" --argjson s1 "[${s1// /,}]" --argjson hz "$CLK_TCK" \
            --arg load "$(cut -d' ' -f1 /proc/loadavg)" --arg steal "$(steal_pct "$t0" "$t1")" \
            --argjson m0 "[${m0// /,}]" --argjson m1 "[${m1// /,}]" \
            '. + {server: {ctxsw: ($s1[0] - $s0[0]), cpu_s: (($s1[1] - $s0[1]) / $hz),
                  ctxsw_per_req: (if .requests > 0 then ($s1[0] - $s0[0]) / .requests else null end),
                  cpu_us_per_req: (if .requests > 0 then ($s1[1] - $s0[1]) / $hz * 1e6 / .requests else null end)},
                  load1: ($load | tonumber), steal_pct: ($steal | tonumber)}
              + (($m1[0] - $m0[0]) as $n | if $n > 0 then {store: {commits: $n,
                  records_per_commit: (($m1[1] - $m0[1]) / $n),
                  commit_us: (($m1[2] - $m0[2]) / $n * 1e6),
                  commit_step_us: (($m1[3] - $m0[3]) / $n * 1e6)}} else {} end)' \
            "$base.json" >"$base.t" && mv "$base.t" "$base.json"
        jq -r '"\(.cycles_per_s) cycles/s  \(.requests_per_s) req/s  cycle p99 \(.latency.cycle.p99_ms) ms  server \(.server.ctxsw_per_req * 100 | round / 100) cs/req \(.server.cpu_us_per_req | round) µs/req  loadgen cpu \(.loadgen_cpu_pct)%  load \(.load1) steal \(.steal_pct)%"' "$base.json"
    fi
    if ! kill -0 "${PID_OF[$yid]}" 2>/dev/null; then
        FAILED=1
        echo "compare.sh: $yid died during the run; the end of its log:" >&2
        tail -20 "$WORK/${yid}.log" >&2 || true
        exit 1
    fi
}

# The independent check, right after loadgen's run on the same server: wrk against mutexd
# (bench/wrk.sh), redis-benchmark against Redis fsync. Writes runs/<scenario>.<tool>.<rep>.txt.
run_independent() { # scenario-id connections rep
    local sid=$1 conns=$2 r=$3 f
    if [[ $sid != distinct* ]]; then return 0; fi
    f=$WORK/runs/$sid.wrk.$r.txt
    printf '  %-12s %-26s ' "$sid#$r" "mutexd, measured by wrk"
    if bench/wrk.sh --port "${PORT[mutexd]}" --connections "$conns" --duration "$DURATION" >"$f" 2>&1; then
        awk '{ v[$1] = $2 } END { printf "%s cycles/s  %s req/s  failures %s\n", v["wrk_cycles_per_s"], v["wrk_requests_per_s"], v["wrk_failures"] }' "$f"
    else
        echo "FAILED ($(head -c 200 "$f"))"
        rm -f "$f"
        FAILED=1
    fi
}

# redis-benchmark runs one command per run and carries nothing from one command to the next,
# so it cannot send a SET NX PX and then the compare-and-delete of that key with that token.
# What it can check is the rate of the durable writes a cycle is made of: SET NX PX on keys
# never used before (every one is written to the AOF and fsynced), against loadgen's
# requests/s on the same server.
run_redis_benchmark() { # scenario-id connections rep
    local sid=$1 conns=$2 r=$3 f n
    if [[ $sid != distinct* ]]; then return 0; fi
    f=$WORK/runs/$sid.rbench.$r.txt
    n=$(jq -r "(.requests_per_s * $DURATION) | floor | if . < 1000 then 1000 else . end" \
        "$WORK/runs/$sid.redis-fsync.$r.json" 2>/dev/null || echo 20000)
    printf '  %-12s %-26s ' "$sid#$r" "Redis fsync, redis-benchmark"
    if redis-benchmark -h 127.0.0.1 -p "${PORT[redis-fsync]}" -c "$conns" -n "$n" -r 1000000000 \
        --csv SET "rb$r:$sid:__rand_int__" token NX PX 15000 >"$f" 2>&1; then
        awk -F'"' 'NR == 2 { printf "%s SET NX PX/s (one fsynced write each)\n", $4 }' "$f"
    else
        echo "FAILED ($(head -c 200 "$f"))"
        rm -f "$f"
        FAILED=1
    fi
}

# ------------------------------------------------------------------ mutexd alone

# Expiry lateness (bench/expiry.py), on the compare run's mutexd: idle, then with the
# distinct ×64 load running beside it.
measure_expiry() {
    printf '  %-12s %-26s ' expiry idle
    /usr/bin/python3 bench/expiry.py --port "${PORT[mutexd]}" \
        >"$WORK/expiry-idle.json"
    cat "$WORK/expiry-idle.json"
    "$LOADGEN" --target mutexd --port "${PORT[mutexd]}" --scenario distinct --connections 64 \
        --duration 30 --warmup 0 >/dev/null 2>&1 &
    LG_PID=$!
    sleep 1
    printf '  %-12s %-26s ' expiry "under distinct ×64"
    /usr/bin/python3 bench/expiry.py --port "${PORT[mutexd]}" \
        >"$WORK/expiry-load.json"
    cat "$WORK/expiry-load.json"
    printf '  %-12s %-26s ' expiry "bursts, under distinct ×64"
    /usr/bin/python3 bench/expiry.py --port "${PORT[mutexd]}" --together \
        >"$WORK/expiry-burst.json"
    cat "$WORK/expiry-burst.json"
    stop_pid "$LG_PID"
    LG_PID=
}

# The disk's fdatasync latency where the data directories are (4 KiB overwrites, 300 of
# them): every durable figure here rests on it.
fsync_latency() { # [count], default 300
    /usr/bin/python3 - "$WORK/fsync-probe" "${1:-300}" <<'PY'
import os, sys, time
fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT, 0o600)
n = int(sys.argv[2])
os.write(fd, b"x" * 4096)
os.fsync(fd)
t = []
for _ in range(n):
    os.pwrite(fd, b"y" * 4096, 0)
    s = time.perf_counter()
    os.fdatasync(fd)
    t.append((time.perf_counter() - s) * 1e6)
t.sort()
p50 = t[n // 2]
print("p50 %.0f µs, p90 %.0f µs, p99 %.0f µs (one connection's floor at two fsyncs a cycle: %.0f cycles/s)"
      % (p50, t[n * 9 // 10], t[min(n - 1, n * 99 // 100)], 1e6 / (2 * p50)))
PY
}

rss_kib() { awk '/^VmRSS/ { print $2 }' "/proc/$1/status"; }

metric() { # port name
    curl -sf --noproxy '*' "http://127.0.0.1:$1/metrics" | awk -v m="$2" '$1 == m { print $2 }'
}

# LEASES held leases in a fresh server: resident memory per lease once their actors have
# gone idle, then SIGKILL and the time until the new server's /readyz answers 200.
measure_leases() {
    local dir=$WORK/leases port pid empty full t0 t1 i
    mkdir -p "$dir"
    "$MUTEXD" --listen 127.0.0.1:0 --data-dir "$dir" 2>"$WORK/leases.log" &
    pid=$!
    PIDS+=("$pid")
    wait_for "mutexd (leases)" 20 grep -q 'msg="started"' "$WORK/leases.log"
    port=$(grep -m1 'msg="started"' "$WORK/leases.log" | sed -n 's/.* address=127\.0\.0\.1:\([0-9]*\).*/\1/p')
    sleep 1
    empty=$(rss_kib "$pid")
    printf '  %-12s %-26s ' leases "fill $(num "$LEASES")"
    "$LOADGEN" --target mutexd --port "$port" --scenario fill --connections 64 \
        --ttl-ms 3600000 --max-requests "$LEASES" --duration 900 --warmup 0 --json \
        >"$WORK/fill.json" 2>"$WORK/fill.err"
    for ((i = 0; i < 100; i++)); do # the actors go idle 2 s after their last turn
        [[ $(metric "$port" mutexd_actors_active) == 0 ]] && break
        sleep 0.1
    done
    full=$(rss_kib "$pid")
    LEASES_HELD=$(metric "$port" mutexd_leases_held)
    FILL_RATE=$(jq -r .cycles_per_s "$WORK/fill.json")
    BYTES_PER_LEASE=$(( (full - empty) * 1024 / LEASES_HELD ))
    RSS_EMPTY=$empty RSS_FULL=$full
    kill -KILL "$pid"
    wait "$pid" 2>/dev/null || true
    t0=$(date +%s%N)
    "$MUTEXD" --listen "127.0.0.1:$port" --data-dir "$dir" 2>>"$WORK/leases.log" &
    pid=$!
    PIDS+=("$pid")
    until curl -sf --noproxy '*' -o /dev/null "http://127.0.0.1:$port/readyz"; do
        kill -0 "$pid" 2>/dev/null || die "mutexd (leases) did not restart; see its log"
        sleep 0.01
    done
    t1=$(date +%s%N)
    RESTART_S=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", (b - a) / 1e9 }')
    RESTORED=$(metric "$port" mutexd_leases_held)
    RSS_RESTARTED=$(rss_kib "$pid")
    echo "$FILL_RATE acquires/s; $BYTES_PER_LEASE B/lease; restart ${RESTART_S} s, $RESTORED leases"
    stop_pid "$pid"
}

# IDLE_CONNS keep-alive connections opened on a fresh server, each answered one request, then
# held open and idle (bench/idle_conns.py): resident memory per connection, the time to open
# them, a request's latency while they are held, and whether they still answer after an
# idle. The server closes the connections idle longest once more than 90% of
# --max-connections are open, and any after --idle-timeout-ms: both are set well clear of
# the run. It raises its soft limit of open files to the hard one, which must leave room for
# them (raised here when it does not: check_nofile has seen that it may be).
measure_idle_conns() {
    local dir=$WORK/idle port pid rc=0 nofile=$((IDLE_CONNS + 256))
    IDLE_MAX_CONNS=$((IDLE_CONNS * 5 / 4 + 100))
    mkdir -p "$dir"
    (
        hard=$(ulimit -Hn)
        if [[ $hard != unlimited ]] && ((hard < nofile)); then
            ulimit -n "$nofile" 2>/dev/null || true
        fi
        exec "$MUTEXD" --listen 127.0.0.1:0 --data-dir "$dir" \
            --max-connections "$IDLE_MAX_CONNS" --idle-timeout-ms 600000
    ) 2>"$WORK/idle.log" &
    pid=$!
    PIDS+=("$pid")
    wait_for "mutexd (idle connections)" 20 grep -q 'msg="started"' "$WORK/idle.log"
    port=$(grep -m1 'msg="started"' "$WORK/idle.log" | sed -n 's/.* address=127\.0\.0\.1:\([0-9]*\).*/\1/p')
    sleep 1
    printf '  %-12s %-26s ' idle "$(num "$IDLE_CONNS") connections"
    /usr/bin/python3 bench/idle_conns.py --port "$port" --pid "$pid" --connections "$IDLE_CONNS" \
        >"$WORK/idle-conns.json" 2>"$WORK/idle-conns.err" || rc=$?
    IDLE_JSON=$(jq -c 'select(type == "object")' "$WORK/idle-conns.json" 2>/dev/null) || true
    [[ -n $IDLE_JSON ]] || IDLE_JSON=null
    if ((rc == 0)) && jq -e .ok <<<"$IDLE_JSON" >/dev/null; then
        jq -r '"opened in \(.open_s) s; \(.kib_per_conn) KiB/connection; request p50 \(.request.p50_ms) ms p99 \(.request.p99_ms) ms (alone \(.request_alone.p50_ms) / \(.request_alone.p99_ms)); \(.sample_answered)/\(.sample) answered again after \(.idle_s) s idle"' <<<"$IDLE_JSON"
    else
        IDLE_ERROR=$(tail -1 "$WORK/idle-conns.err")
        echo "FAILED (exit $rc; $IDLE_ERROR)"
        FAILED=1
    fi
    stop_pid "$pid"
}

# ------------------------------------------------------------------ report

get() { # scenario system jq-path: the value, or empty when the run failed
    local f=$WORK/runs/$1.$2.json
    if [[ -f $f ]]; then jq -r "$3 // empty" "$f"; fi
}

# Text for a gnuplot title in enhanced mode, where ^ _ @ & ~ { } are markup.
gp_text() {
    printf '%s' "$1" | sed 's/[\\^_@&~{}]/\\\\&/g'
}

num() { # 12345.6 -> 12,346
    [[ -n $1 ]] || { printf 'failed'; return; }
    LC_ALL=C printf '%.0f' "$1" | sed ':a;s/\B[0-9]\{3\}\>/,&/;ta'
}

ratio() {
    [[ -n $1 && -n $2 ]] || { printf 'n/a'; return; }
    awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f×", a / b; else printf "n/a" }'
}

spread() { # numbers on stdin, one a line: "min / median / max", whole numbers with commas
    sort -g | awk '{ a[NR] = $1 } END { if (NR) print a[1], a[int((NR + 1) / 2)], a[NR] }' |
        { read -r lo me hi || true; [[ -n ${lo:-} ]] && printf '%s / %s / %s' "$(num "$lo")" "$(num "$me")" "$(num "$hi")" || printf 'failed'; }
}

reps() { # scenario system jq-path: the value of every repetition, one a line
    local f
    for f in "$WORK/runs/$1.$2".[0-9]*.json; do [[ -f $f ]] && jq -r "$3 // empty" "$f"; done
}

tool_reps() { # scenario tool key: the value of every repetition of wrk or redis-benchmark
    local f
    for f in "$WORK/runs/$1.$2".[0-9]*.txt; do
        [[ -f $f ]] || continue
        if [[ $2 == wrk ]]; then
            awk -v k="$3" '$1 == k { print $2 }' "$f"
        else
            awk -F'"' 'NR == 2 { print $4 }' "$f"
        fi
    done
}

lat() { # scenario system hist: "p50 / p99 / p999"
    local v
    v=$(get "$1" "$2" "[.latency.$3 | .p50_ms, .p99_ms, .p999_ms] | map(tostring) | join(\" / \")")
    [[ -n $v ]] && printf '%s' "$v" || printf 'failed'
}

# The cpu line of /proc/stat: user nice system idle iowait irq softirq steal.
cpu_ticks() {
    awk '/^cpu / { print $2 + $3 + $4 + $5 + $6 + $7 + $8 + $9, $9 }' /proc/stat
}

# Percent of CPU time a hypervisor took away between two cpu_ticks samples.
steal_pct() {
    awk -v a="$1" -v b="$2" 'BEGIN { split(a, x, " "); split(b, y, " ");
        t = y[1] - x[1]; printf "%.1f", (t > 0 ? 100 * (y[2] - x[2]) / t : 0) }'
}

machine() {
    local cpu mem
    cpu=$(grep -m1 'model name' /proc/cpuinfo 2>/dev/null | cut -d: -f2 | sed 's/^ *//')
    mem=$(awk '/MemTotal/ { printf "%.1f GiB", $2 / 1048576 }' /proc/meminfo)
    printf '%s cores, %s, %s, %s' "$(nproc)" "$mem" "$(uname -sr)" "${cpu:-unknown CPU}"
}

# The fdatasync p50 (µs) measured before a scenario.
fsync_p50_of() { # scenario-id
    sed -n 's/^p50 \([0-9]*\) .*/\1/p' <<<"${FSYNC_AT[$1]:-}"
}

# The one-connection floor from the fdatasync p50 measured before a scenario: a durable
# cycle waits for two of them.
floor_of() { # scenario-id
    fsync_p50_of "$1" | awk '$1 > 0 { printf "%.0f", 1e6 / (2 * $1) }'
}

target() { # what measured met(1|0)
    echo "| $1 | $2 | $([[ $3 == 1 ]] && echo met || echo '**missed**') |"
}

# A target on mutexd's cycles/s against Redis fsync's in one scenario.
at_least() { # what scenario-id factor [more text after the ratio]
    local a b
    a=$(get "$2" mutexd .cycles_per_s) b=$(get "$2" redis-fsync .cycles_per_s)
    target "$1" "$(ratio "$a" "$b")${4:-}" \
        "$(awk -v a="$a" -v b="$b" -v k="$3" 'BEGIN { print (b > 0 && a >= k * b) }')"
}

write_report() {
    local md=$OUT.md commit date mach s y sid slabel sargs yid ylabel ytarget row
    commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
    date=$(date -u '+%Y-%m-%d %H:%M UTC')
    mach=$(machine)
    {
        echo "# mutexd, Redis and etcd as lease servers on one machine"
        echo
        echo "commit \`$commit\` · $date · $mach"
        echo
        echo "CPU steal during the runs: $STEAL% (time a hypervisor gave to other machines;"
        echo "more than a few percent makes these numbers noisy, distinct ×1 above all)."
        echo
        echo "The disk's \`fdatasync\` (4 KiB overwrites, where the data directories are): before"
        echo "the runs $FSYNC_BEFORE; after them $FSYNC_AFTER. Every durable"
        echo "figure rests on it: a durable answer waits for one."
        echo
        echo "mutexd $("$MUTEXD" --version 2>/dev/null | head -1 | awk '{print $NF}') ·" \
            "Redis $(redis-server --version | sed -n 's/.* v=\([^ ]*\).*/\1/p') ·" \
            "etcd $(etcd --version | sed -n 's/^etcd Version: //p') ·" \
            "$DURATION s measured per run after $WARMUP s of warm-up, $REPS repetitions$( ((QUICK)) && echo ' (--quick: a smoke test, not a measurement)')"
        echo
        echo "mutexd's settings: $(server_settings)"
        echo
        echo "## Lease cycles per second (higher is better)"
        echo
        row="| |"
        for s in "${SCENARIOS[@]}"; do IFS='|' read -r sid slabel sargs <<<"$s"; row+=" $slabel |"; done
        echo "$row"
        row="|---|"
        for s in "${SCENARIOS[@]}"; do row+="---:|"; done
        echo "$row"
        for y in "${SYSTEMS[@]}"; do
            IFS='|' read -r yid ylabel ytarget <<<"$y"
            row="| $ylabel |"
            for s in "${SCENARIOS[@]}"; do
                IFS='|' read -r sid slabel sargs <<<"$s"
                row+=" $(num "$(get "$sid" "$yid" .cycles_per_s)") |"
            done
            echo "$row"
        done
        for y in redis-fsync etcd; do
            [[ $y == etcd ]] && row="| **mutexd / etcd** |" || row="| **mutexd / Redis fsync** |"
            for s in "${SCENARIOS[@]}"; do
                IFS='|' read -r sid slabel sargs <<<"$s"
                row+=" $(ratio "$(get "$sid" mutexd .cycles_per_s)" "$(get "$sid" "$y" .cycles_per_s)") |"
            done
            echo "$row"
        done
        echo
        echo "## Every repetition, and what a request cost the server"
        echo
        echo "$REPS repetitions of each scenario, the systems in turn within each (mutexd, Redis"
        echo "fsync, Redis in memory, etcd, then again): cycles/s min / median / max; the tables"
        echo "above and below show the median run. Context switches (voluntary + nonvoluntary,"
        echo "all the server's threads, \`/proc/<pid>/task/*/status\`) and CPU time (utime + stime,"
        echo "\`/proc/<pid>/stat\`) of the server process, read at the start and the end of each"
        echo "measured window, per request answered in it: median run's figure (range over the"
        echo "repetitions). Load average (1 min) and CPU steal: range over the repetitions' windows."
        echo
        echo "| scenario | system | cycles/s min / median / max | server switches / request | server CPU µs / request | load | steal % |"
        echo "|---|---|---|---|---|---|---|"
        for s in "${SCENARIOS[@]}"; do
            IFS='|' read -r sid slabel sargs <<<"$s"
            for y in "${SYSTEMS[@]}"; do
                IFS='|' read -r yid ylabel ytarget <<<"$y"
                echo "| $slabel | $ylabel | $(reps "$sid" "$yid" .cycles_per_s | spread)" \
                    "| $(get "$sid" "$yid" '.server.ctxsw_per_req * 100 | round / 100') ($(reps "$sid" "$yid" '.server.ctxsw_per_req * 100 | round / 100' | sort -g | sed -n '1p;$p' | paste -sd- -))" \
                    "| $(get "$sid" "$yid" '.server.cpu_us_per_req | round') ($(reps "$sid" "$yid" '.server.cpu_us_per_req | round' | sort -g | sed -n '1p;$p' | paste -sd- -))" \
                    "| $(reps "$sid" "$yid" .load1 | sort -g | sed -n '1p;$p' | paste -sd- -)" \
                    "| $(reps "$sid" "$yid" .steal_pct | sort -g | sed -n '1p;$p' | paste -sd- -) |"
            done
        done
        echo
        echo "The disk's \`fdatasync\` before each scenario (100 overwrites of 4 KiB), and the load"
        echo "average then:"
        echo
        for s in "${SCENARIOS[@]}"; do
            IFS='|' read -r sid slabel sargs <<<"$s"
            echo "- $slabel: ${FSYNC_AT[$sid]}; load ${LOAD_AT[$sid]}"
        done
        echo
        echo "mutexd's commits in its median run, from its \`/metrics\` at the start and the end of"
        echo "the measured window: how many, the changes each carried, and their mean time, with the"
        echo "part of it in SQLite's \`COMMIT\` (the WAL's writes and its \`fdatasync\`) beside the"
        echo "disk's \`fdatasync\` p50 measured, idle, before the scenario."
        echo
        echo "| scenario | commits/s | changes a commit | commit µs | of it \`COMMIT\` µs | idle \`fdatasync\` p50 µs |"
        echo "|---|---:|---:|---:|---:|---:|"
        for s in "${SCENARIOS[@]}"; do
            IFS='|' read -r sid slabel sargs <<<"$s"
            echo "| $slabel | $(num "$(get "$sid" mutexd ".store.commits // empty | . / $DURATION")")" \
                "| $(get "$sid" mutexd '.store.records_per_commit // empty | . * 10 | round / 10')" \
                "| $(get "$sid" mutexd '.store.commit_us // empty | round')" \
                "| $(get "$sid" mutexd '.store.commit_step_us // empty | round')" \
                "| $(fsync_p50_of "$sid") |"
        done
        echo
        echo "## The independent check: wrk and redis-benchmark beside loadgen"
        echo
        echo "In each repetition, right after loadgen's run on the same server: \`bench/wrk.sh\`"
        echo "(wrk, one thread per connection, each connection cycling acquire → release on its own"
        echo "key) against mutexd, and \`redis-benchmark\` against Redis fsync. redis-benchmark sends"
        echo "one command per run and keeps nothing from one answer for the next request, so it"
        echo "cannot send a compare-and-delete with the token its SET used; it measures \`SET key"
        echo "token NX PX 15000\` on keys never used before, each one an fsynced AOF write: compare"
        echo "it with loadgen's requests/s on Redis fsync (a cycle is two such writes). min / median"
        echo "/ max over the repetitions."
        echo
        echo "| scenario | mutexd cycles/s, loadgen | mutexd cycles/s, wrk | Redis fsync requests/s, loadgen | Redis fsync SET NX PX/s, redis-benchmark |"
        echo "|---|---|---|---|---|"
        for s in "${SCENARIOS[@]}"; do
            IFS='|' read -r sid slabel sargs <<<"$s"
            [[ $sid == distinct* ]] || continue
            echo "| $slabel | $(reps "$sid" mutexd .cycles_per_s | spread)" \
                "| $(tool_reps "$sid" wrk wrk_cycles_per_s | spread)" \
                "| $(reps "$sid" redis-fsync .requests_per_s | spread)" \
                "| $(tool_reps "$sid" rbench x | spread) |"
        done
        echo
        echo "## Cycle latency, ms: p50 / p99 / p999 (mixed: the contenders' cycles)"
        echo
        row="| |"
        for s in "${SCENARIOS[@]}"; do IFS='|' read -r sid slabel sargs <<<"$s"; row+=" $slabel |"; done
        echo "$row mixed: holders' renew |"
        row="|---|"
        for s in "${SCENARIOS[@]}"; do row+="---|"; done
        echo "$row---|"
        for y in "${SYSTEMS[@]}"; do
            IFS='|' read -r yid ylabel ytarget <<<"$y"
            row="| $ylabel |"
            for s in "${SCENARIOS[@]}"; do
                IFS='|' read -r sid slabel sargs <<<"$s"
                row+=" $(lat "$sid" "$yid" cycle) |"
            done
            echo "$row $(lat mixed "$yid" renew) |"
        done
        echo
        echo "## Expiry: a waiter granted after the holder's TTL ran out"
        echo
        echo "\`bench/expiry.py\`: 50 resources, their starts spread over one TTL (bursts: all"
        echo "50 at once), 4 rounds each, TTL 1 s. Lateness as"
        echo "the waiter sees it = its answer received (wall clock) − the holder's deadline as"
        echo "the server stated it (\`acquired_at\` + TTL, whole ms): the expiry, the grant's"
        echo "commit and fsync and the answer's way back. Beside it a coarser bound from the"
        echo "holder's acquire *sent* (its own round trip counted too), and the server's own"
        echo "figure (the two leases' \`acquired_at\` apart, whole ms)."
        echo
        echo "| load | hand-offs | p50 ms | p99 ms | max ms | from the send: p50 / p99 / max ms | server's p50 / max ms |"
        echo "|---|---:|---:|---:|---:|---|---|"
        for y in idle load burst; do
            jq -r --arg l "$(case $y in idle) echo idle ;; load) echo 'distinct ×64 running' ;;
                             *) echo 'bursts of 50, distinct ×64 running' ;; esac)" \
                '"| \($l) | \(.count) | \(.p50_ms) | \(.p99_ms) | \(.max_ms) | \(.sent_p50_ms) / \(.sent_p99_ms) / \(.sent_max_ms) | \(.server_p50_ms) / \(.server_max_ms) |"' \
                "$WORK/expiry-$y.json"
        done
        echo
        echo "## $(num "$LEASES") held leases"
        echo
        echo "Filled by \`loadgen --scenario fill\` (64 connections, TTL 1 h) at $(num "$FILL_RATE")"
        echo "acquires/s. Resident memory: $(num "$RSS_EMPTY") KiB empty, $(num "$RSS_FULL") KiB with"
        echo "$(num "$LEASES_HELD") leases held: **$BYTES_PER_LEASE bytes per lease**. Killed with"
        echo "SIGKILL and started again: **/readyz answered 200 after $RESTART_S s** with"
        echo "$(num "$RESTORED") leases restored ($(num "$RSS_RESTARTED") KiB resident)."
        echo
        echo "## $(num "$IDLE_CONNS") idle connections"
        echo
        echo "\`bench/idle_conns.py\` against a fresh server (\`--max-connections $IDLE_MAX_CONNS"
        echo "--idle-timeout-ms 600000\`): $(num "$IDLE_CONNS") keep-alive connections, at most 256"
        echo "opening at a time, each answered one \`GET /healthz\`, then held open and idle."
        if jq -e .ok <<<"$IDLE_JSON" >/dev/null; then
            jq -r --arg n "$(num "$IDLE_CONNS")" '"Memory per connection **\(.kib_per_conn) KiB** (resident \(.rss_before_kib / 1024 * 10 | round / 10) → \(.rss_after_kib / 1024 * 10 | round / 10) MiB), all \($n) opened and answered in \(.open_s) s; a request while they are held (\(.request.count) `GET /healthz` on one more connection): **p50 \(.request.p50_ms) ms, p99 \(.request.p99_ms) ms** (on the same connection before they were opened: p50 \(.request_alone.p50_ms) ms, p99 \(.request_alone.p99_ms) ms). After \(.idle_s) s idle, none closed and \(.sample_answered) of \(.sample) held connections asked again answered."' <<<"$IDLE_JSON"
        else
            echo "**Failed**: ${IDLE_ERROR:-no result}."
        fi
        echo
        echo "## Targets"
        echo
        echo "Each line compares the median runs of one compare.sh run; with the spread above and"
        echo "the machine's noise, a line is a reading of this run, not a verdict."
        echo
        echo "| target | measured | |"
        echo "|---|---|---|"
        at_least "distinct ×64 ≥ 1.3× Redis fsync" distinct64 1.3
        at_least "1 connection ≥ 1.0× Redis fsync" distinct1 1.0 \
            "; the floor of two fdatasyncs a cycle: $(floor_of distinct1) cycles/s, mutexd at $(awk -v a="$(get distinct1 mutexd .cycles_per_s)" -v f="$(floor_of distinct1)" 'BEGIN { if (f > 0) printf "%.0f%%", 100 * a / f; else printf "?" }') of it"
        local hk fs rt
        hk=$(get hotkey64 mutexd .cycles_per_s) rt=$(get ping1 mutexd .latency.request.p50_ms)
        fs=$(fsync_p50_of hotkey64)
        target "hot key ×64 ≥ 90% of one fdatasync and one round trip a hand-off" \
            "$(num "$hk") hand-offs/s; the floor at the fdatasync p50 before the scenario ($fs µs) and one connection's no-op round trip p50 (${rt:-?} ms): $(awk -v f="$fs" -v r="$rt" 'BEGIN { if (f > 0 && r > 0) printf "%.0f", 1e6 / (f + 1000 * r); else printf "?" }')/s, mutexd at $(awk -v a="$hk" -v f="$fs" -v r="$rt" 'BEGIN { if (f > 0 && r > 0) printf "%.0f%%", 100 * a * (f + 1000 * r) / 1e6; else printf "?" }') of it, its own \`COMMIT\` $(get hotkey64 mutexd '.store.commit_step_us // empty | round') µs a hand-off; $(ratio "$hk" "$(get hotkey64 redis-fsync .cycles_per_s)") Redis fsync" \
            "$(awk -v a="$hk" -v f="$fs" -v r="$rt" 'BEGIN { print (f > 0 && r > 0 && a * (f + 1000 * r) / 1e6 >= 0.9) }')"
        at_least "renew ×64 ≥ 1.3× Redis fsync" renew64 1.3
        at_least "mixed ×256 ≥ 1.3× Redis fsync" mixed 1.3
        local pm pr
        pm=$(get distinct64 mutexd .latency.request.p99_ms) pr=$(get distinct64 redis-fsync .latency.request.p99_ms)
        target "request p99 at 64 connections ≤ Redis fsync's (distinct ×64)" \
            "${pm:-failed} ms against ${pr:-failed} ms" \
            "$(awk -v a="$pm" -v b="$pr" 'BEGIN { print (a != "" && b != "" && a <= b) }')"
        target "held leases: < 300 B each" "$BYTES_PER_LEASE B" "$((BYTES_PER_LEASE < 300))"
        target "restart with them: < 3 s" "$RESTART_S s" \
            "$(awk -v a="$RESTART_S" -v n="$RESTORED" -v l="$LEASES_HELD" 'BEGIN { print (a < 3 && n == l) }')"
        target "expiry under load: a waiter granted < 10 ms after the TTL, p99" \
            "p99 $(jq -r .p99_ms "$WORK/expiry-load.json") ms under load from the deadline ($(jq -r .p99_ms "$WORK/expiry-idle.json") ms idle; at worst $(jq -r .max_ms "$WORK/expiry-load.json") and $(jq -r .max_ms "$WORK/expiry-idle.json") ms); from the holder's send p99 $(jq -r .sent_p99_ms "$WORK/expiry-load.json") ms under load; in bursts of 50 p99 $(jq -r .p99_ms "$WORK/expiry-burst.json") ms" \
            "$(jq -s '[.[].p99_ms] | max < 10 | if . then 1 else 0 end' "$WORK/expiry-idle.json" "$WORK/expiry-load.json")"
        echo
        echo "## Every run: requests, errors, the load generator's own CPU"
        echo
        echo "| scenario | system | requests/s | cycles | errors: non-2xx / conflicts / timeouts / io | wait expired | Redis retries | loadgen CPU |"
        echo "|---|---|---:|---:|---|---:|---:|---:|"
        for s in "${SCENARIOS[@]}"; do
            IFS='|' read -r sid slabel sargs <<<"$s"
            for y in "${SYSTEMS[@]}"; do
                IFS='|' read -r yid ylabel ytarget <<<"$y"
                if [[ ! -f $WORK/runs/$sid.$yid.json ]]; then
                    echo "| $slabel | $ylabel | failed | | | | | |"
                    continue
                fi
                echo "| $slabel | $ylabel | $(num "$(get "$sid" "$yid" .requests_per_s)")" \
                    "| $(num "$(get "$sid" "$yid" '.cycles + .holder_cycles')")" \
                    "| $(get "$sid" "$yid" '[.errors | .non2xx, .conflicts, .timeouts, .io] | map(tostring) | join(" / ")')" \
                    "| $(get "$sid" "$yid" .errors.wait_expired)" \
                    "| $(get "$sid" "$yid" .spins)" \
                    "| $(get "$sid" "$yid" .loadgen_cpu_pct)% |"
            done
        done
        echo
        echo "## The load generator's ceiling"
        echo
        echo "Requests that do nothing (GET /healthz, PING, GET /health; \`$(cut -d'|' -f3 <<<"$PING")\`"
        echo "and \`--connections 1\`, $PING_DURATION s each, once): what one loadgen thread reaches against each"
        echo "server on this machine, and one connection's round trip with nothing behind it."
        echo
        echo "| system | connections | requests/s | p50 / p99 ms | loadgen CPU |"
        echo "|---|---:|---:|---|---:|"
        for y in "${SYSTEMS[@]}"; do
            IFS='|' read -r yid ylabel ytarget <<<"$y"
            for p in ping:64 ping1:1; do
                echo "| $ylabel | ${p#*:} | $(num "$(get "${p%:*}" "$yid" .requests_per_s)")" \
                    "| $(get "${p%:*}" "$yid" '[.latency.request | .p50_ms, .p99_ms] | map(tostring) | join(" / ")')" \
                    "| $(get "${p%:*}" "$yid" .loadgen_cpu_pct)% |"
            done
        done
        echo
        echo "## How each system is driven"
        echo
        echo "One loadgen thread (epoll, keep-alive connections, closed loop: a connection sends its"
        echo "next request when the answer to the last one has come) on the same $(nproc) cores as"
        echo "the server. A cycle is acquire → release; in renew, acquire → 3 renewals → release."
        echo
        echo "- **mutexd**: \`POST /v1/resources/{key}/acquire|renew|release\`; contenders wait in"
        echo "  the server's FIFO queue with \`wait_ms\` (5000)."
        echo "- **Redis**: \`SET key token NX PX ttl\`; release and renew are compare-and-delete and"
        echo "  compare-and-\`PEXPIRE\` Lua scripts run with \`EVALSHA\`. Redis has no queue: a"
        echo "  contender that finds the key held sleeps 1 ms and tries again (\"Redis retries\")."
        echo "- **etcd** (v3 JSON gateway): \`lease/grant\` → \`lock/lock\` with the lease (blocks:"
        echo "  FIFO waiting) → \`lock/unlock\` → \`lease/revoke\`, four requests a cycle;"
        echo "  renew is \`lease/keepalive\`. Lease TTLs are whole seconds."
        echo
        echo "Scenarios (loadgen arguments, plus \`--duration $DURATION --warmup $WARMUP\`):"
        echo
        for s in "${SCENARIOS[@]}"; do
            IFS='|' read -r sid slabel sargs <<<"$s"
            echo "- $slabel: \`$sargs\`"
        done
        echo
        echo "![cycles per second]($(basename "$OUT").png)"
    } >"$md"

    # Bar chart: one cluster per scenario, one bar per system, log scale.
    local tsv=$WORK/chart.tsv v runs=()
    for v in "$WORK"/runs/*.json; do [[ -f $v ]] && runs+=("$v"); done
    : >"$tsv"
    for s in "${SCENARIOS[@]}"; do
        IFS='|' read -r sid slabel sargs <<<"$s"
        row="\"$slabel\""
        for y in "${SYSTEMS[@]}"; do
            IFS='|' read -r yid ylabel ytarget <<<"$y"
            v=$(get "$sid" "$yid" .cycles_per_s)
            row+=$'\t'${v:-?}
        done
        echo "$row" >>"$tsv"
    done
    local ymin
    ymin=$(awk -F'\t' '{ for (i = 2; i <= NF; i++) if ($i != "?" && $i > 0 && (m == "" || $i < m)) m = $i }
        END { e = 1; while (m != "" && e * 10 <= m) e *= 10; print e }' "$tsv")
    gnuplot <<EOF
set terminal pngcairo size 1200,650 font "DejaVu Sans,10"
set output "$OUT.png"
set title "Lease cycles per second (log scale; higher is better)\n{/*0.85 $(gp_text "commit $commit · $date · $mach")}"
set datafile missing "?"
set datafile separator "\t"
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.85 border -1
set boxwidth 0.9
set logscale y
set yrange [$ymin:*]
set ylabel "cycles/s"
set grid ytics
set key outside bottom center horizontal
plot "$tsv" using 2:xtic(1) title "mutexd" lc rgb "#1f77b4", \
     "" using 3 title "Redis, AOF fsync always" lc rgb "#d62728", \
     "" using 4 title "Redis, in memory" lc rgb "#ff9896", \
     "" using 5 title "etcd" lc rgb "#2ca02c", \
     "" using (\$0-0.3):2:(sprintf("%.0f",\$2)) with labels offset 0,0.6 font ",8" notitle, \
     "" using (\$0-0.1):3:(sprintf("%.0f",\$3)) with labels offset 0,0.6 font ",8" notitle, \
     "" using (\$0+0.1):4:(sprintf("%.0f",\$4)) with labels offset 0,0.6 font ",8" notitle, \
     "" using (\$0+0.3):5:(sprintf("%.0f",\$5)) with labels offset 0,0.6 font ",8" notitle
EOF

    jq -n --arg commit "$commit" --arg date "$date" --arg machine "$mach" \
        --argjson duration "$DURATION" --argjson warmup "$WARMUP" --argjson idle "$IDLE_JSON" \
        '{commit: $commit, date: $date, machine: $machine, duration_s: $duration,
          warmup_s: $warmup, idle_connections: $idle, runs: [inputs]}' "${runs[@]}" </dev/null >"$OUT.json"
}

# ------------------------------------------------------------------ main

install_missing
build_tools
check_nofile
mkdir -p "$WORK/runs" "$RESULTS"

echo "starting servers (data in $WORK)"
start_mutexd
start_redis redis-fsync --appendonly yes --appendfsync always
start_redis redis-mem --appendonly no
start_etcd
echo "  mutexd :${PORT[mutexd]}  redis-fsync :${PORT[redis-fsync]}  redis-mem :${PORT[redis-mem]}  etcd :${PORT[etcd]}"

FSYNC_BEFORE=$(fsync_latency)
echo "  fdatasync: $FSYNC_BEFORE"
TICKS_START=$(cpu_ticks)
# Every scenario REPS times, the systems one after the other in each repetition (mutexd,
# Redis fsync, Redis in memory, etcd, mutexd, Redis fsync...): a slow minute of the machine
# lands on all of them, not on one. The disk's fsync latency is measured again before each
# scenario.
declare -A FSYNC_AT=() LOAD_AT=()
for s in "${SCENARIOS[@]}"; do
    IFS='|' read -r sid slabel sargs <<<"$s"
    FSYNC_AT[$sid]=$(fsync_latency 100)
    LOAD_AT[$sid]=$(cut -d' ' -f1-3 /proc/loadavg)
    echo "  $sid: fdatasync ${FSYNC_AT[$sid]}; load average ${LOAD_AT[$sid]}"
    conns=$(sed -n 's/.*--connections \([0-9]*\).*/\1/p' <<<"$sargs")
    for ((r = 1; r <= REPS; r++)); do
        for ((y = 0; y < ${#SYSTEMS[@]}; y++)); do
            run_one "$s" "$y" "$DURATION" "$r"
            case ${SYSTEMS[$y]%%|*} in
            mutexd) run_independent "$sid" "$conns" "$r" ;;
            redis-fsync) run_redis_benchmark "$sid" "$conns" "$r" ;;
            esac
        done
    done
done
for ((y = 0; y < ${#SYSTEMS[@]}; y++)); do
    run_one "$PING" "$y" "$PING_DURATION" 1
    run_one "$PING1" "$y" "$PING_DURATION" 1
done
# The run with the median cycles/s of each scenario and system stands for it in the tables
# (runs/<scenario>.<system>.json); the spread table shows them all.
for s in "${SCENARIOS[@]}" "$PING" "$PING1"; do
    IFS='|' read -r sid slabel sargs <<<"$s"
    for y in "${SYSTEMS[@]}"; do
        IFS='|' read -r yid ylabel ytarget <<<"$y"
        files=()
        for f in "$WORK/runs/$sid.$yid".[0-9]*.json; do [[ -f $f ]] && files+=("$f"); done
        ((${#files[@]})) || continue
        med=$(for f in "${files[@]}"; do echo "$(jq .cycles_per_s "$f") $f"; done |
            sort -g | awk '{ a[NR] = $2 } END { print a[int((NR + 1) / 2)] }')
        cp "$med" "$WORK/runs/$sid.$yid.json"
    done
done
measure_expiry
STEAL=$(steal_pct "$TICKS_START" "$(cpu_ticks)")
FSYNC_AFTER=$(fsync_latency)
echo "  fdatasync: $FSYNC_AFTER"
stop_pid "${PID_OF[redis-fsync]}"
stop_pid "${PID_OF[redis-mem]}"
stop_pid "${PID_OF[etcd]}"
stop_pid "${PID_OF[mutexd]}"
measure_leases
measure_idle_conns
# Tag every run with its scenario and system for the JSON file.
for f in "$WORK"/runs/*.json; do
    [[ -f $f ]] || continue
    b=$(basename "$f" .json)
    rest=${b#*.}
    jq --arg case "${b%%.*}" --arg system "${rest%%.*}" --arg rep "${rest#*.}" \
        '{case: $case, system: $system, rep: ($rep | tonumber? // "median")} + .' "$f" >"$f.t"
    mv "$f.t" "$f"
done

write_report
echo
cat "$OUT.md"
echo
echo "written: ${OUT#"$ROOT"/}.md, .png, .json"
if ((!QUICK)); then # the report goes between the markers of bench/NOTES.md, whole, and of
    # docs/benchmarks.md, its headline tables
    begin='<!-- compare.sh: begin -->' end='<!-- compare.sh: end -->'
    for doc in docs/benchmarks.md bench/NOTES.md; do
        if ! grep -qF "$begin" "$doc" || ! grep -qF "$end" "$doc"; then
            die "$doc has no compare.sh markers"
        fi
    done
    cp "$OUT.png" docs/benchmarks-compare.png
    # put_section DOC FILE: FILE's lines replace what is between DOC's markers.
    put_section() {
        awk -v b="$begin" -v e="$end" -v f="$2" '
            $0 == b { print; while ((getline l < f) > 0) print l; skip = 1; next }
            $0 == e { skip = 0 }
            !skip' "$1" >"$WORK/doc.md"
        mv "$WORK/doc.md" "$1"
    }
    sed -e '1d' -e 's/^## /### /' "$OUT.md" >"$WORK/section.md"
    sed -e "s|($(basename "$OUT").png)|(../docs/benchmarks-compare.png)|" "$WORK/section.md" \
        >"$WORK/notes.md"
    put_section bench/NOTES.md "$WORK/notes.md"
    # The headline: what comes before the first table, the tables below, and the chart.
    awk -v png="($(basename "$OUT").png)" '
        /^### / {
            h3 = 1
            keep = /^### (Lease cycles per second|Cycle latency|Expiry|1,000,000 held leases|10,000 idle connections|Targets)/
        }
        i = index($0, png) {
            print substr($0, 1, i - 1) "(benchmarks-compare.png)" substr($0, i + length(png))
            next
        }
        !h3 || keep' "$WORK/section.md" >"$WORK/headline.md"
    printf '%s\n' '' "Every repetition, the independent check with wrk and redis-benchmark, every" \
        "run's errors, the load generator's ceiling and how each system is driven:" \
        "[the whole report](../bench/NOTES.md#mutexd-redis-and-etcd-side-by-side-benchcomparesh)." \
        >>"$WORK/headline.md"
    put_section docs/benchmarks.md "$WORK/headline.md"
    echo "written: docs/benchmarks.md and bench/NOTES.md (between their markers)," \
        "docs/benchmarks-compare.png"
fi
((FAILED == 0)) || die "some runs failed (see above)"
