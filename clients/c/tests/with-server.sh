#!/usr/bin/env bash
# Runs a command next to a fresh mutexd: starts $MUTEXD_BIN on a free loopback port with a
# temporary data directory and --min-ttl-ms 500 (so that tests may use short TTLs), exports
# MUTEXD_URL and MUTEXD_SERVER_PID, runs the command, stops the server and exits with the
# command's status. It builds nothing.
#
#   clients/c/tests/with-server.sh COMMAND [ARGS...]
#
#   MUTEXD_BIN          the server (default: build/mutexd of this checkout)
#   MUTEXD_SERVER_ARGS  more server flags, split on spaces ("--max-waiters 1"); with
#                       --tls-cert in them, MUTEXD_URL is https
#
# The server is stopped whatever happens: on exit and on INT, TERM or HUP by a trap, and, when
# this script is killed outright (SIGKILL from a test runner's timeout), by a watchdog in its
# own session that waits for this script to go away. When the command fails, the end of the
# server's log goes to stderr.
set -uo pipefail

if [ "${1:-}" = --watchdog ]; then # --watchdog OWNER_PID SERVER_PID DIR
    owner=$2 server=$3 dir=$4
    while kill -0 "$owner" 2>/dev/null; do
        sleep 0.5
    done
    kill -KILL "$server" 2>/dev/null
    rm -rf "$dir"
    exit 0
fi

[ $# -gt 0 ] || {
    echo "usage: $0 COMMAND [ARGS...]" >&2
    exit 2
}

here=$(cd "$(dirname "$0")" && pwd)
bin=${MUTEXD_BIN:-$here/../../../build/mutexd}
[ -x "$bin" ] || {
    echo "with-server.sh: no server at $bin (set MUTEXD_BIN, or build it first)" >&2
    exit 2
}

dir=$(mktemp -d "${TMPDIR:-/tmp}/mutexd-client-test.XXXXXX") || exit 1
server=
child=
watchdog=

# shellcheck disable=SC2317 # run by the EXIT trap
stop_server() {
    [ -n "$server" ] || return 0
    kill -TERM "$server" 2>/dev/null
    for _ in $(seq 1 100); do
        kill -0 "$server" 2>/dev/null || break
        sleep 0.1
    done
    kill -KILL "$server" 2>/dev/null
    wait "$server" 2>/dev/null
    server=
}

# shellcheck disable=SC2317 # run by the EXIT trap
finish() {
    trap - EXIT INT TERM HUP
    if [ -n "$child" ] && kill -0 "$child" 2>/dev/null; then
        kill -TERM "$child" 2>/dev/null
        wait "$child" 2>/dev/null
    fi
    stop_server
    [ -n "$watchdog" ] && kill "$watchdog" 2>/dev/null
    rm -rf "$dir"
}
trap finish EXIT
trap 'exit 129' HUP
trap 'exit 130' INT
trap 'exit 143' TERM

read -r -a extra <<<"${MUTEXD_SERVER_ARGS:-}"
"$bin" --listen 127.0.0.1:0 --data-dir "$dir/data" --min-ttl-ms 500 --log-level info \
    "${extra[@]}" 2>"$dir/server.log" &
server=$!
watchdog=$(setsid "$0" --watchdog $$ "$server" "$dir" </dev/null >/dev/null 2>&1 & echo $!)

address=
for _ in $(seq 1 200); do
    address=$(sed -n 's/.*msg="started".* address=\([^ ]*\).*/\1/p' "$dir/server.log")
    [ -n "$address" ] && break
    kill -0 "$server" 2>/dev/null || break
    sleep 0.05
done
if [ -z "$address" ]; then
    echo "with-server.sh: the server did not start:" >&2
    cat "$dir/server.log" >&2
    exit 1
fi

scheme=http
case " ${extra[*]:-} " in
*" --tls-cert "*) scheme=https ;;
esac
export MUTEXD_URL="$scheme://$address"
export MUTEXD_SERVER_PID=$server

# In the background and waited for, so that a signal runs the trap at once.
"$@" &
child=$!
wait "$child"
rc=$?
child=
if [ "$rc" -ne 0 ]; then
    echo "---- with-server.sh: the command exited $rc; the server's log ends with:" >&2
    tail -n 30 "$dir/server.log" >&2
fi
exit "$rc"
