#!/usr/bin/env bash
# Runs a command next to a fresh Azurite (scripts/azurite.sh): installs it if needed, starts it
# on a free port, exports MUTEXD_TEST_BLOB_CONNECTION_STRING and MUTEXD_TEST_AZURITE_PORT, runs
# the command, stops Azurite and exits with the command's status.
#
#   scripts/with-azurite.sh COMMAND [ARGS...]
#
# Azurite is stopped whatever happens: on exit and on INT, TERM or HUP by a trap; and when this
# script is killed outright (SIGKILL, as a test runner's timeout does), by a watchdog in its own
# session that waits for this script to go away and then ends the command and Azurite.
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)

if [ "${1:-}" = --watchdog ]; then # --watchdog OWNER_PID DIR
    owner=$2 dir=$3
    echo $$ >"$dir/watchdog.pid" 2>/dev/null
    while kill -0 "$owner" 2>/dev/null; do
        sleep 0.2
    done
    # The owner is gone: its command, if still running, has lost its Azurite too.
    cmd=$(cat "$dir/command.pid" 2>/dev/null) && kill -TERM "$cmd" 2>/dev/null
    "$here/azurite.sh" stop "$dir"
    rm -rf "$dir"
    exit 0
fi

[ $# -gt 0 ] || {
    echo "usage: $0 COMMAND [ARGS...]" >&2
    exit 2
}
"$here/azurite.sh" install || exit 1

dir=$(mktemp -d "${TMPDIR:-/tmp}/mutexd-azurite.XXXXXX") || exit 1
child=

# shellcheck disable=SC2317 # run by the EXIT trap
finish() {
    trap - EXIT INT TERM HUP
    if [ -n "$child" ] && kill -0 "$child" 2>/dev/null; then
        kill -TERM "$child" 2>/dev/null
        wait "$child" 2>/dev/null
    fi
    "$here/azurite.sh" stop "$dir"
    local wd
    wd=$(cat "$dir/watchdog.pid" 2>/dev/null) && kill "$wd" 2>/dev/null
    rm -rf "$dir"
}
trap finish EXIT
trap 'exit 129' HUP
trap 'exit 130' INT
trap 'exit 143' TERM

# The watchdog is started before Azurite, so no moment exists in which Azurite runs unwatched.
setsid -f "$0" --watchdog $$ "$dir" </dev/null >/dev/null 2>&1

"$here/azurite.sh" start "$dir" || {
    cat "$dir/azurite.log" >&2 2>/dev/null
    exit 1
}
MUTEXD_TEST_BLOB_CONNECTION_STRING=$(cat "$dir/connection-string")
MUTEXD_TEST_AZURITE_PORT=$(cat "$dir/port")
export MUTEXD_TEST_BLOB_CONNECTION_STRING MUTEXD_TEST_AZURITE_PORT

# In the background and waited for, so that a signal runs the trap at once.
"$@" &
child=$!
echo "$child" >"$dir/command.pid"
wait "$child"
rc=$?
child=
exit "$rc"
