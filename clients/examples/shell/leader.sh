#!/usr/bin/env bash
# Leader election with mutexd and `mutexctl run`.
#
# Start this worker many times, on one machine or on many: each one tries to lead
# $MUTEXD_RESOURCE. The one that holds the lease prints a line every second; the others print
# that they could not acquire it and try again a few seconds later. When the leader stops
# (SIGTERM, a crash, a lost network), its lease is released or runs out and another worker
# takes over. mutexctl renews the lease at a third of its TTL, and stops the leader's work at
# once if the lease is lost, so two leaders never work at the same time. Before each of its
# actions the leader runs `mutexctl check`, which compares the clock with the lease's deadline:
# a leader paused past it (SIGSTOP, a frozen VM) stops there instead of acting once more.
#
# Each line names the worker (the PID this script prints is the worker's: SIGTERM or SIGKILL of
# it ends its leadership, and mutexctl with it) and the host name, which tells containers
# apart; the leader's lines carry its fencing token.
#
#   MUTEXD_URL=http://127.0.0.1:8080 clients/examples/shell/leader.sh
#
# Environment:
#   MUTEXD_URL       the server, or a group's servers separated by commas (default
#                    http://127.0.0.1:8080)
#   MUTEXD_RESOURCE  what to lead (default leader-election/demo)
#   MUTEXD_TTL_MS    the lease's TTL in milliseconds (default 15000)
#   MUTEXD_RETRY_S   seconds between two tries of a worker that does not lead (default 5)
#   MUTEXD_TOKEN     bearer token, when the server asks for one
#   MUTEXCTL         the mutexctl to use (default: mutexctl from PATH)
#
# SIGTERM or SIGINT ends a worker cleanly: a leader stops its work and releases the lease
# first, so that another worker takes over at once. Exit status 0.
set -u

host=$(uname -n)
mutexctl=${MUTEXCTL:-mutexctl}

if [ "${1:-}" = --lead ]; then
    # The leader's work, run by mutexctl while the lease is held. $2 is the worker's PID.
    # MUTEXD_FENCING_TOKEN is in the environment: real work passes it to what it writes.
    trap 'exit 0' TERM INT HUP
    # `mutexctl check` right before each action: it fails once the lease's deadline has
    # passed, even if this process was paused and mutexctl has not noticed yet.
    while "$mutexctl" check; do
        printf '[%s] This process (%s) is currently the leader. Host %s, fencing token %s.\n' \
            "$(date +%H:%M:%S)" "$2" "$host" "$MUTEXD_FENCING_TOKEN"
        sleep 1 &
        wait $!
    done
    exit 1
fi

resource=${MUTEXD_RESOURCE:-leader-election/demo}
ttl_ms=${MUTEXD_TTL_MS:-15000}
retry_s=${MUTEXD_RETRY_S:-5}
self=$$

command -v "$mutexctl" >/dev/null || {
    echo "leader.sh: no mutexctl at '$mutexctl' (put it on PATH, or set MUTEXCTL)" >&2
    exit 2
}

child=
stopping=0
# shellcheck disable=SC2317 # run by the traps
stop() {
    stopping=1
    [ -n "$child" ] && kill -TERM "$child" 2>/dev/null
}
trap stop TERM INT HUP

# Waits for $child to end (a trap interrupts `wait`; mutexctl may still be releasing).
wait_child() {
    local rc
    wait "$child"
    rc=$?
    while kill -0 "$child" 2>/dev/null; do
        wait "$child"
        rc=$?
    done
    child=
    return "$rc"
}

while [ "$stopping" -eq 0 ]; do
    # --quiet: "held" is this script's to say. mutexctl exits 1 when the lease is held, or
    # when it was lost while leading (it says that one on stderr).
    # --parent-pid: should this worker die, even by SIGKILL, mutexctl stops the leader's work
    # and releases the lease.
    "$mutexctl" --quiet run "$resource" --ttl "${ttl_ms}ms" --owner "$host:$self" \
        --parent-pid "$self" -- "$BASH" "$0" --lead "$self" &
    child=$!
    wait_child
    rc=$?
    [ "$stopping" -eq 1 ] && break
    why=
    [ "$rc" -ne 1 ] && why=" (mutexctl exited $rc)"
    printf '[%s] This process (%s) could not acquire lease%s. Retrying in %s seconds. Host %s.\n' \
        "$(date +%H:%M:%S)" "$self" "$why" "$retry_s" "$host"
    sleep "$retry_s" &
    child=$!
    wait_child
done
exit 0
