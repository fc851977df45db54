#!/usr/bin/env bash
# Runs the topology of docker-compose.yml natively, with no container engine: Azurite
# from npm, the server with exactly the environment the compose file gives it, and three
# Python leader-election workers with theirs (host names become loopback addresses, ports
# free ones). Runs Azurite's health check as the compose file writes it. Checks that
# exactly one worker leads, that stopping the leader (as `docker stop` does, SIGTERM) hands
# leadership over, and that killing the next one (SIGKILL, as `docker kill`) does too
# within the lease's TTL. The leader is read from the server: the holder's owner is
# "<hostname>:<pid>", and the pid is a worker's. Stops everything it started.
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

# A service's health check command in the normalized compose file, one argument a line.
service_check() {
    docker-compose -f docker-compose.yml config | /usr/bin/python3 -c '
import sys, yaml
test = yaml.safe_load(sys.stdin)["services"][sys.argv[1]]["healthcheck"]["test"]
assert test[0] == "CMD", test
for a in test[1:]:
    print(a)' "$1"
}

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

# Azurite's health check, as written (the host's node, Azurite's port).
mapfile -t azcheck < <(service_check azurite)
"${azcheck[@]//127.0.0.1:10000/127.0.0.1:$AZ_PORT}" || fail "Azurite's health check fails against Azurite"

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
RESOURCE=$(printf '%s\n' "${wenv[@]}" | sed -n 's/^MUTEXD_RESOURCE=//p')
RETRY_S=$(printf '%s\n' "${wenv[@]}" | sed -n 's/^MUTEXD_RETRY_S=//p')
declare -A wpid=()
for i in 1 2 3; do
    env "${wenv[@]}" PYTHONPATH="$ROOT/clients/python" /usr/bin/python3 -u \
        clients/examples/python/leader.py > "$WORK/worker$i.log" 2>&1 &
    wpid[$i]=$!
    pids+=($!)
done

# The worker that holds the lease now (by the pid in the holder's owner), or nothing.
leader_now() {
    curl -s --max-time 2 "http://127.0.0.1:$SRV_PORT/v1/resources/$RESOURCE" |
        /usr/bin/python3 -c '
import json, sys
st = json.load(sys.stdin)
if st.get("state") == "held":
    print(st["holder"]["owner"].rsplit(":", 1)[1])' | {
        read -r pid || exit 0
        for i in 1 2 3; do
            if [ "${wpid[$i]}" = "$pid" ]; then echo "$i"; fi
        done
    }
}

sleep 3
leader=""
for _ in $(seq 1 50); do
    leader=$(leader_now)
    [ -n "$leader" ] && break
    sleep 0.2
done
[ -n "$leader" ] || fail "no worker leads"
# The same one keeps it, and the other two are still running (and trying).
for _ in $(seq 1 20); do
    [ "$(leader_now)" = "$leader" ] || fail "the leader changed with nothing stopped"
    sleep 0.2
done
for i in 1 2 3; do
    kill -0 "${wpid[$i]}" || fail "worker $i exited"
done
echo "native: worker $leader leads; the others wait"

# docker stop: SIGTERM. The leader releases; another takes over at once (within a retry).
kill -TERM "${wpid[$leader]}"
wait "${wpid[$leader]}" || fail "the stopped leader did not exit 0"
t=$(date +%s)
deadline=$((t + RETRY_S + 3))
next=""
while [ "$(date +%s)" -le "$deadline" ]; do
    next=$(leader_now)
    [ -n "$next" ] && [ "$next" != "$leader" ] && break
    next=""
    sleep 0.2
done
[ -n "$next" ] || fail "no takeover within $((RETRY_S + 3)) s of stopping the leader"
echo "native: after stopping worker $leader, worker $next leads"

# docker kill: SIGKILL. Its lease runs out; another takes over within the TTL (plus a retry).
kill -KILL "${wpid[$next]}"
t=$(date +%s)
limit=$(( (TTL_MS + 999) / 1000 + RETRY_S + 2 ))
last=""
while [ "$(date +%s)" -le "$((t + limit))" ]; do
    last=$(leader_now)
    [ -n "$last" ] && [ "$last" != "$next" ] && break
    last=""
    sleep 0.2
done
[ -n "$last" ] || fail "no takeover within $limit s of killing worker $next"
echo "native: after killing worker $next, worker $last leads (within ${limit} s)"
echo "native: 4 passed, 0 failed"
