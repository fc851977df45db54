#!/usr/bin/env bash
# Runs the topology of docker-compose.yml natively, with no container engine: Azurite
# from npm, the server with exactly the environment the compose file gives it, and three
# Python leader-election workers with theirs (host names become loopback addresses, ports
# free ones). Checks that exactly one worker leads, that stopping the leader (as
# `docker compose stop` does, SIGTERM) hands leadership over, and that killing the next
# one (SIGKILL) does too within the lease's TTL. Stops everything it started.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
BIN=${MUTEXD_BIN:-$ROOT/build/mutexd}
WORK=$(mktemp -d)
pids=()

cleanup() {
    for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
    scripts/azurite.sh stop "$WORK/azurite" >/dev/null 2>&1 || true
    rm -rf "$WORK"
}
trap cleanup EXIT INT TERM

fail() { echo "native: FAILED: $*" >&2; for f in "$WORK"/worker*.log "$WORK/mutexd.log"; do echo "--- $f" >&2; tail -n 20 "$f" >&2 || true; done; exit 1; }

free_port() { /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# The environment of a service in the normalized compose file, as NAME=VALUE lines.
service_env() {
    docker-compose -f docker-compose.yml config | /usr/bin/python3 -c '
import sys, yaml
env = yaml.safe_load(sys.stdin)["services"][sys.argv[1]]["environment"]
for k, v in env.items():
    print("%s=%s" % (k, v))' "$1"
}

mkdir -p "$WORK/azurite"
scripts/azurite.sh install >/dev/null
scripts/azurite.sh start "$WORK/azurite" >/dev/null
AZ_PORT=$(cat "$WORK/azurite/port")
SRV_PORT=$(free_port)

# The server, as the compose file configures it.
declare -a senv=()
while IFS= read -r kv; do
    kv=${kv//azurite:10000/127.0.0.1:$AZ_PORT}
    case $kv in
        MUTEXD_LISTEN=*) kv="MUTEXD_LISTEN=127.0.0.1:$SRV_PORT" ;;
        MUTEXD_DATA_DIR=*) kv="MUTEXD_DATA_DIR=$WORK/data" ;;
    esac
    senv+=("$kv")
done < <(service_env mutexd)
env "${senv[@]}" "$BIN" > "$WORK/mutexd.log" 2>&1 &
pids+=($!)
# Its own health check, as the compose file runs it.
for _ in $(seq 1 100); do
    env "${senv[@]}" "$BIN" --probe 2>/dev/null && break
    sleep 0.1
done
env "${senv[@]}" "$BIN" --probe || fail "the server did not become healthy"
grep -q 'msg="mirror: shipping"' "$WORK/mutexd.log" || fail "the server does not mirror to Azurite"

# Three workers, as the compose file configures them.
declare -a wenv=()
while IFS= read -r kv; do
    wenv+=("${kv//mutexd:8080/127.0.0.1:$SRV_PORT}")
done < <(service_env worker)
TTL_MS=$(printf '%s\n' "${wenv[@]}" | sed -n 's/^MUTEXD_TTL_MS=//p')
RETRY_S=$(printf '%s\n' "${wenv[@]}" | sed -n 's/^MUTEXD_RETRY_S=//p')
declare -A wpid=()
for i in 1 2 3; do
    env "${wenv[@]}" PYTHONPATH="$ROOT/clients/python" /usr/bin/python3 -u \
        clients/examples/python/leader.py > "$WORK/worker$i.log" 2>&1 &
    wpid[$i]=$!
    pids+=($!)
done

# Who led during the last `secs` seconds (workers that printed a leader line then).
leaders_since() { # since-epoch-seconds
    for i in 1 2 3; do
        /usr/bin/python3 - "$WORK/worker$i.log" "$1" <<'PY' && echo "$i"
import sys, time, re
path, since = sys.argv[1], float(sys.argv[2])
day = time.strftime("%Y-%m-%d ")
for line in open(path, errors="replace"):
    m = re.match(r"\[(\d\d:\d\d:\d\d)\] This process \(\d+\) is currently the leader\.", line)
    if m and time.mktime(time.strptime(day + m.group(1), "%Y-%m-%d %H:%M:%S")) >= since:
        sys.exit(0)
sys.exit(1)
PY
    done
}

sleep 5
t=$(date +%s)
sleep 4
mapfile -t now < <(leaders_since "$t")
[ "${#now[@]}" -eq 1 ] || fail "expected one leader, saw ${#now[@]}: ${now[*]:-none}"
leader=${now[0]}
for i in 1 2 3; do
    [ "$i" = "$leader" ] && continue
    grep -q "could not acquire lease. Retrying in" "$WORK/worker$i.log" || fail "worker $i is not waiting"
done
echo "native: worker $leader leads; the others wait"

# docker compose stop: SIGTERM. The leader releases; another takes over at once.
kill -TERM "${wpid[$leader]}"
wait "${wpid[$leader]}" || fail "the stopped leader did not exit 0"
t=$(date +%s)
deadline=$((t + RETRY_S + 3))
next=""
while [ "$(date +%s)" -le "$deadline" ]; do
    mapfile -t now < <(leaders_since "$t")
    for w in "${now[@]}"; do [ "$w" != "$leader" ] && next=$w; done
    [ -n "$next" ] && break
    sleep 0.2
done
[ -n "$next" ] || fail "no takeover within $((RETRY_S + 3)) s of stopping the leader"
echo "native: after stopping worker $leader, worker $next leads"

# A crash: SIGKILL. Its lease runs out; another takes over within the TTL (plus a retry).
kill -KILL "${wpid[$next]}"
t=$(date +%s)
limit=$(( (TTL_MS + 999) / 1000 + RETRY_S + 2 ))
last=""
while [ "$(date +%s)" -le "$((t + limit))" ]; do
    sleep 0.5
    mapfile -t now < <(leaders_since "$((t + 1))")
    for w in "${now[@]}"; do [ "$w" != "$next" ] && [ "$w" != "$leader" ] && last=$w; done
    [ -n "$last" ] && break
done
[ -n "$last" ] || fail "no takeover within $limit s of killing worker $next"
echo "native: after killing worker $next, worker $last leads (within ${limit} s)"
echo "native: 3 passed, 0 failed"
