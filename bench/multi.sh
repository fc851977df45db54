#!/usr/bin/env bash
# Several resources at once (docs/api.md, "Several resources at once"), with bench/loadgen.
# Loopback only.
#
#   bench/multi.sh [SECONDS [REPS]]    default 10 s per run after 2 s of warm-up, 3 repetitions
#                                      (about 4 minutes on a quiet machine)
#
# Three kinds of acquire -> release cycle, each connection on names of its own, at 1 and at
# 64 connections, against one fresh mutexd (durable, its default options):
#   one resource        loadgen --scenario distinct: acquire, release (the reference)
#   two singles         loadgen --scenario pair: acquire A, acquire B, release A, release B
#   one multi request   loadgen --scenario pair --multi: POST /v1/acquire naming A and B,
#                       then POST /v1/release naming both (one lease_id for the set)
# The six cases run in alternating order (forward in odd repetitions, backward in even
# ones). Around each measured window the script reads the server's commits from its /metrics
# (mutexd_store_commit_batch_size_count and _sum: commits, and the changes they wrote) and
# its CPU time from /proc, and gives them per cycle.
#
# The machine is shared: before each measured run it reads the 1-minute load average (as
# uptime prints it); above LOAD_MAX (default 2) it waits LOAD_WAIT seconds (default 60) and
# reads it again, up to LOAD_TRIES times (default 10), then runs anyway and says so in the
# run's row. Every row carries the load before and after its run.
#
# Prints a Markdown report (commit, machine, every run, min / median / max per case, the
# ratios the goal is read from) and writes it to bench/results/multi-<date>.md, with every
# run's loadgen output and figures in multi-<date>.json. The server gets a free port and a
# temporary data directory; both it and the directory are gone at the end, on failure and on
# Ctrl-C. BUILD (default: build) is where mutexd and loadgen are; mutexd is built with `make
# build` when missing, loadgen is compiled into the temporary directory when missing or
# older than its sources.
set -euo pipefail

usage() {
    sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'
}
case ${1:-} in
-h | --help) usage; exit 0 ;;
esac
SECS=${1:-10}
REPS=${2:-3}
[[ $SECS =~ ^[0-9]+$ && $SECS -gt 0 && $REPS =~ ^[0-9]+$ && $REPS -gt 0 ]] || {
    echo "multi.sh: SECONDS and REPS are positive whole numbers (see --help)" >&2
    exit 2
}
WARMUP=2
LOAD_MAX=${LOAD_MAX:-2}
LOAD_WAIT=${LOAD_WAIT:-60}
LOAD_TRIES=${LOAD_TRIES:-10}

cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/mutexd-multi.XXXXXX")
MPID='' LGPID=''
cleanup() {
    local p
    for p in $LGPID $MPID; do kill "$p" 2>/dev/null || true; done
    for p in $LGPID $MPID; do wait "$p" 2>/dev/null || true; done
    rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
die() {
    echo "multi.sh: $*" >&2
    exit 1
}

[[ -x $BUILD/mutexd ]] || make build >/dev/null
[[ -x $BUILD/mutexd ]] || die "no $BUILD/mutexd after make build"
# shellcheck source=bench/loadgen-path.sh
. bench/loadgen-path.sh
loadgen_path "$BUILD" "$WORK"

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
CLK_TCK=$(getconf CLK_TCK)
ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; } # a process's CPU time, clock ticks
# mutexd's commits and the changes they wrote, from /metrics: "commits changes".
commits() {
    curl -sf --noproxy '*' "http://127.0.0.1:$PORT/metrics" | awk '
        $1 == "mutexd_store_commit_batch_size_count" { n = $2 }
        $1 == "mutexd_store_commit_batch_size_sum" { r = $2 }
        END { print n + 0, r + 0 }'
}
load1() { cut -d' ' -f1 /proc/loadavg; }

# Waits while the 1-minute load is above LOAD_MAX, LOAD_TRIES times at most; sets LOAD0 (the
# load the run starts at) and WAITS ("" when it was low enough, else what was waited).
quiet() {
    local try=0
    LOAD0=$(load1)
    while awk -v l="$LOAD0" -v m="$LOAD_MAX" 'BEGIN { exit !(l > m) }'; do
        if ((try >= LOAD_TRIES)); then
            WAITS="ran anyway after waiting $try × $LOAD_WAIT s"
            echo "multi.sh: load $LOAD0 still above $LOAD_MAX; running anyway" >&2
            return
        fi
        try=$((try + 1))
        echo "multi.sh: $(uptime | sed 's/^ *//'); above $LOAD_MAX, waiting $LOAD_WAIT s" \
            "($try of $LOAD_TRIES)" >&2
        sleep "$LOAD_WAIT"
        LOAD0=$(load1)
    done
    WAITS=$( ((try == 0)) || echo "waited $try × $LOAD_WAIT s")
}

PORT=$(free_port)
mkdir -p "$WORK/data"
"$BUILD/mutexd" --listen "127.0.0.1:$PORT" --data-dir "$WORK/data" 2>"$WORK/mutexd.log" &
MPID=$!
for _ in $(seq 1 100); do
    curl -sf --noproxy '*' "http://127.0.0.1:$PORT/readyz" >/dev/null 2>&1 && break
    kill -0 "$MPID" 2>/dev/null || die "mutexd did not start: $(tail -5 "$WORK/mutexd.log")"
    sleep 0.1
done
curl -sf --noproxy '*' "http://127.0.0.1:$PORT/readyz" >/dev/null || die "mutexd is not ready"

# id | label | loadgen arguments
CASES=(
    "one1|one resource ×1|--scenario distinct --connections 1"
    "singles1|two singles ×1|--scenario pair --connections 1"
    "multi1|one multi request ×1|--scenario pair --multi --connections 1"
    "one64|one resource ×64|--scenario distinct --connections 64"
    "singles64|two singles ×64|--scenario pair --connections 64"
    "multi64|one multi request ×64|--scenario pair --multi --connections 64"
)

# measure CASE REP: one measured run; appends its figures (one JSON object) to runs.jsonl and
# its row to the report, and prints the row.
measure() {
    local id label args r=$2 out c0 c1 m0 m1 t0 t1 rc=0
    IFS='|' read -r id label args <<<"$1"
    out=$WORK/$id.$r.json
    quiet
    # shellcheck disable=SC2086 # args is a list of arguments
    timeout -k 5 $((SECS + WARMUP + 30)) "$LOADGEN" --target mutexd --port "$PORT" $args \
        --duration "$SECS" --warmup "$WARMUP" --json >"$out" 2>"$out.err" &
    LGPID=$!
    sleep "$WARMUP"
    t0=$(date +%s%N) c0=$(ticks "$MPID") m0=$(commits)
    sleep "$SECS"
    t1=$(date +%s%N) c1=$(ticks "$MPID") m1=$(commits)
    wait "$LGPID" || rc=$?
    LGPID=
    ((rc == 0)) || die "loadgen failed in $id #$r (exit $rc): $(head -c 300 "$out.err")"
    kill -0 "$MPID" 2>/dev/null || die "mutexd died during $id #$r: $(tail -5 "$WORK/mutexd.log")"
    python3 - "$out" "$id" "$label" "$r" "$((t1 - t0))" "$m0" "$m1" "$((c1 - c0))" "$CLK_TCK" \
        "$LOAD0" "$(load1)" "$WAITS" >>"$WORK/runs.jsonl" <<'PY'
import json, sys
out, id_, label, rep, ns, m0, m1, ticks, hz, load0, load1, waits = sys.argv[1:]
d = json.load(open(out))
secs = int(ns) / 1e9
n0, r0 = (float(x) for x in m0.split())
n1, r1 = (float(x) for x in m1.split())
cycles = d["cycles_per_s"] * secs  # the cycles of the script's window, at loadgen's rate
print(json.dumps({
    "id": id_, "label": label, "rep": int(rep), "loadgen": d,
    "cycles_per_s": d["cycles_per_s"], "requests_per_s": d["requests_per_s"],
    "cycle_p50_ms": d["latency"]["cycle"]["p50_ms"], "cycle_p99_ms": d["latency"]["cycle"]["p99_ms"],
    "errors": sum(d["errors"].values()),
    "commits_per_cycle": (n1 - n0) / cycles if cycles else None,
    "changes_per_commit": (r1 - r0) / (n1 - n0) if n1 > n0 else None,
    "server_us_per_cycle": int(ticks) / int(hz) * 1e6 / cycles if cycles else None,
    "load_before": float(load0), "load_after": float(load1), "waits": waits,
}))
PY
    tail -1 "$WORK/runs.jsonl" | python3 -c '
import json, sys
x = json.loads(sys.stdin.read())
print("| %s #%d | %.0f | %.0f | %.3f | %.3f | %d | %.2f | %.2f | %.0f | %.2f / %.2f%s |" % (
    x["label"], x["rep"], x["cycles_per_s"], x["requests_per_s"], x["cycle_p50_ms"],
    x["cycle_p99_ms"], x["errors"], x["commits_per_cycle"], x["changes_per_commit"],
    x["server_us_per_cycle"], x["load_before"], x["load_after"],
    ", " + x["waits"] if x["waits"] else ""))' | tee -a "$WORK/report.md"
}

commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
[[ -z $(git status --porcelain -- bench 2>/dev/null) ]] || commit="$commit with uncommitted bench changes"
cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')
mem=$(awk '/MemTotal/ { printf "%.1f GiB", $2 / 1048576 }' /proc/meminfo)
stamp=$(date -u +%Y-%m-%d-%H%M%S)
{
    echo "commit \`$commit\` · $(date -u '+%Y-%m-%d %H:%M UTC') · $(nproc) cores, $mem," \
        "$(uname -sr), ${cpu:-unknown CPU}"
    echo
    echo "Load average before the runs: $(cut -d' ' -f1-3 /proc/loadavg). ${SECS} s runs after" \
        "${WARMUP} s of warm-up, $REPS repetition(s), the cases in alternating order."
    echo
    echo "### Every run"
    echo
    echo "| case, repetition | cycles/s | requests/s | cycle p50 ms | cycle p99 ms | errors | commits a cycle | changes a commit | server µs a cycle | load before / after |"
    echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"
} | tee "$WORK/report.md"

for r in $(seq 1 "$REPS"); do
    order=("${CASES[@]}")
    if ((r % 2 == 0)); then
        order=()
        for ((i = ${#CASES[@]} - 1; i >= 0; i--)); do order+=("${CASES[$i]}"); done
    fi
    for c in "${order[@]}"; do
        measure "$c" "$r"
    done
done

python3 - "$WORK/runs.jsonl" <<'PY' | tee -a "$WORK/report.md"
import json, statistics as st, sys
runs = [json.loads(l) for l in open(sys.argv[1])]
by = {}
for x in runs:
    by.setdefault(x["id"], []).append(x)
def med(id_, k):
    v = [x[k] for x in by.get(id_, []) if x[k] is not None]
    return st.median(v) if v else float("nan")
print()
print("### Medians (cycles/s: median, min–max)")
print()
print("| case | cycles/s | cycle p50 ms | cycle p99 ms | commits a cycle | changes a commit | server µs a cycle | errors |")
print("|---|---:|---:|---:|---:|---:|---:|---:|")
for id_ in ["one1", "singles1", "multi1", "one64", "singles64", "multi64"]:
    xs = by.get(id_)
    if not xs:
        continue
    c = [x["cycles_per_s"] for x in xs]
    print("| %s | %s (%s–%s) | %.3f | %.3f | %.2f | %.2f | %.0f | %d |" % (
        xs[0]["label"], f"{st.median(c):,.0f}", f"{min(c):,.0f}", f"{max(c):,.0f}",
        med(id_, "cycle_p50_ms"), med(id_, "cycle_p99_ms"), med(id_, "commits_per_cycle"),
        med(id_, "changes_per_commit"), med(id_, "server_us_per_cycle"),
        sum(x["errors"] for x in xs)))
print()
print("### The goal: a multi request's cycles against two singles' and one resource's")
print()
print("| connections | multi ÷ two singles (medians; per repetition) | multi ÷ one resource (medians; per repetition) |")
print("|---|---|---|")
for n in (1, 64):
    m, s, o = (by.get(f"{k}{n}", []) for k in ("multi", "singles", "one"))
    def per_rep(a, b):
        rb = {x["rep"]: x["cycles_per_s"] for x in b}
        return ", ".join("%.2f×" % (x["cycles_per_s"] / rb[x["rep"]])
                         for x in a if rb.get(x["rep"]))
    def ratio(a, b):
        ca, cb = [x["cycles_per_s"] for x in a], [x["cycles_per_s"] for x in b]
        return "%.2f×" % (st.median(ca) / st.median(cb)) if ca and cb else "?"
    print("| ×%d | **%s** (%s) | **%s** (%s) |" % (n, ratio(m, s), per_rep(m, s), ratio(m, o),
                                                  per_rep(m, o)))
waited = [x for x in runs if x["waits"]]
print()
print("Load average (1 min) before the runs: %.2f to %.2f; after: %.2f to %.2f. %s" % (
    min(x["load_before"] for x in runs), max(x["load_before"] for x in runs),
    min(x["load_after"] for x in runs), max(x["load_after"] for x in runs),
    "%d of %d runs waited for the load (see their rows)." % (len(waited), len(runs))
    if waited else "No run waited for the load."))
PY
mkdir -p bench/results
cp "$WORK/report.md" "bench/results/multi-$stamp.md"
python3 -c 'import json, sys; print(json.dumps([json.loads(l) for l in open(sys.argv[1])]))' \
    "$WORK/runs.jsonl" >"bench/results/multi-$stamp.json"
echo
echo "multi.sh: wrote bench/results/multi-$stamp.md and .json"
