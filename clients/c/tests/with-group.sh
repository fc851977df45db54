#!/usr/bin/env bash
# Runs a command next to a fresh server group on a fresh Azurite (scripts/with-azurite.sh, which
# it runs itself under unless it already runs under one): MUTEXD_GROUP_SIZE servers (default 3) of one blob container, each on a free
# loopback port with --ha, --mirror sync, its own URL advertised and --min-ttl-ms 500. Exports
# MUTEXD_URLS and MUTEXD_PIDS (the servers' URLs and process ids, comma-separated, in one
# order), runs the command, stops the servers that still run (SIGTERM) and exits with the
# command's status. The command may stop a server itself. It builds nothing.
#
#   clients/c/tests/with-group.sh COMMAND [ARGS...]
#
#   MUTEXD_BIN          the server (default: build/mutexd of this checkout)
#   MUTEXD_SERVER_ARGS  more flags for every server, split on spaces ("--partitions 16")
#
# The servers are stopped whatever happens: on exit and on INT, TERM or HUP by a trap, and,
# when this script is killed outright, by a watchdog in its own session that waits for this
# script to go away. When the command fails, the end of each server's log goes to stderr.
set -uo pipefail

if [ "${1:-}" = --watchdog ]; then # --watchdog OWNER_PID DIR
    owner=$2 dir=$3
    while kill -0 "$owner" 2>/dev/null; do
        sleep 0.5
    done
    for f in "$dir"/*.pid; do
        [ -f "$f" ] && kill -KILL "$(cat "$f")" 2>/dev/null
    done
    rm -rf "$dir"
    exit 0
fi

[ $# -gt 0 ] || {
    echo "usage: $0 COMMAND [ARGS...]" >&2
    exit 2
}
here=$(cd "$(dirname "$0")" && pwd)
if [ -z "${MUTEXD_TEST_BLOB_CONNECTION_STRING:-}" ]; then
    exec "$here/../../../scripts/with-azurite.sh" "$0" "$@"
fi
bin=${MUTEXD_BIN:-$here/../../../build/mutexd}
[ -x "$bin" ] || {
    echo "with-group.sh: no server at $bin (set MUTEXD_BIN, or build it first)" >&2
    exit 2
}
size=${MUTEXD_GROUP_SIZE:-3}

dir=$(mktemp -d "${TMPDIR:-/tmp}/mutexd-client-group.XXXXXX") || exit 1
servers=()
child=
watchdog=

# shellcheck disable=SC2317 # run by the EXIT trap
finish() {
    trap - EXIT INT TERM HUP
    if [ -n "$child" ] && kill -0 "$child" 2>/dev/null; then
        kill -TERM "$child" 2>/dev/null
        wait "$child" 2>/dev/null
    fi
    local pid
    for pid in "${servers[@]}"; do
        kill -TERM "$pid" 2>/dev/null
    done
    for pid in "${servers[@]}"; do
        for _ in $(seq 1 200); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.1
        done
        kill -KILL "$pid" 2>/dev/null
        wait "$pid" 2>/dev/null
    done
    [ -n "$watchdog" ] && kill "$watchdog" 2>/dev/null
    rm -rf "$dir"
}
trap finish EXIT
trap 'exit 129' HUP
trap 'exit 130' INT
trap 'exit 143' TERM

watchdog=$(setsid "$0" --watchdog $$ "$dir" </dev/null >/dev/null 2>&1 & echo $!)

free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

read -r -a extra <<<"${MUTEXD_SERVER_ARGS:-}"
container=g$(od -An -N8 -tx1 /dev/urandom | tr -d ' \n')
urls=() pids=()
for i in $(seq 1 "$size"); do
    started=
    # Another process may take the free port before the server binds it: then another one.
    for _ in 1 2 3 4 5; do
        port=$(free_port) || exit 1
        url=http://127.0.0.1:$port
        log=$dir/server$i.log
        "$bin" --listen "127.0.0.1:$port" --data-dir "$dir/data$i" --min-ttl-ms 500 \
            --threads 2 --log-level info --ha --advertise-url "$url" --mirror sync \
            --blob-connection-string "$MUTEXD_TEST_BLOB_CONNECTION_STRING" \
            --blob-container "$container" "${extra[@]}" 2>"$log" &
        pid=$!
        servers+=("$pid")
        echo "$pid" >"$dir/server$i.pid"
        for _ in $(seq 1 300); do
            grep -q 'msg="started"' "$log" && started=1 && break
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.05
        done
        [ -n "$started" ] && break
        kill -KILL "$pid" 2>/dev/null
        wait "$pid" 2>/dev/null
        unset 'servers[-1]'
        rm -f "$dir/server$i.pid"
        grep -q "in use" "$log" || break
    done
    if [ -z "$started" ]; then
        echo "with-group.sh: server $i did not start:" >&2
        cat "$log" >&2
        exit 1
    fi
    urls+=("$url")
    pids+=("$pid")
done
MUTEXD_URLS=$(IFS=,; echo "${urls[*]}")
MUTEXD_PIDS=$(IFS=,; echo "${pids[*]}")
export MUTEXD_URLS MUTEXD_PIDS

# In the background and waited for, so that a signal runs the trap at once.
"$@" &
child=$!
wait "$child"
rc=$?
child=
if [ "$rc" -ne 0 ]; then
    for i in $(seq 1 "$size"); do
        echo "---- with-group.sh: the command exited $rc; server $i's log ends with:" >&2
        tail -n 15 "$dir/server$i.log" >&2
    done
fi
exit "$rc"
