#!/usr/bin/env bash
# The leader-election example (clients/examples/shell/leader.sh) against a real server:
# one worker leads and beats, the other says it could not acquire the lease; SIGTERM ends the
# leader cleanly and releases the lease, so the other takes over well before the TTL would
# have run out; SIGTERM ends a waiting worker too.
#
#   with-server.sh test_leader_example.sh PATH/TO/leader.sh
set -uo pipefail

leader=${1:?usage: $0 PATH/TO/leader.sh}
: "${MUTEXCTL:?MUTEXCTL must name mutexctl}" "${MUTEXD_URL:?run this through with-server.sh}"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/leader-test.XXXXXX") || exit 1
pids=()
# shellcheck disable=SC2317 # run by the EXIT trap
cleanup() {
    local p
    for p in "${pids[@]}"; do
        kill -KILL "$p" 2>/dev/null
    done
    rm -rf "$tmp"
}
trap cleanup EXIT
# A test runner's timeout sends SIGTERM: leave through the EXIT trap.
trap 'exit 143' TERM INT HUP
failures=0
fail() {
    echo "FAIL: $*"
    failures=$((failures + 1))
}
wait_for() { # at most 10 s
    for _ in $(seq 1 100); do
        "$@" && return 0
        sleep 0.1
    done
    return 1
}

# A long TTL: a takeover within seconds can only come from a release.
export MUTEXD_RESOURCE=leader-election/test MUTEXD_TTL_MS=10000 MUTEXD_RETRY_S=1

bash "$leader" >"$tmp/a.out" 2>"$tmp/a.err" &
a=$!
pids+=("$a")
wait_for grep -q "($a) is currently the leader" "$tmp/a.out" || fail "the first worker leads"
bash "$leader" >"$tmp/b.out" 2>"$tmp/b.err" &
b=$!
pids+=("$b")
sleep 2.5

host=$(uname -n)
token=$("$MUTEXCTL" --json status "$MUTEXD_RESOURCE" | sed -n 's/.*"fencing_token":"\{0,1\}\([0-9]*\).*/\1/p')
[ -n "$token" ] || fail "the resource has a fencing token"
beat='^\[[0-2][0-9]:[0-5][0-9]:[0-5][0-9]\] This process ('"$a"') is currently the leader\. Host '"$host"', fencing token '"$token"'\.$'
[ "$(grep -c "$beat" "$tmp/a.out")" -ge 2 ] || fail "the leader beats every second"
grep -v -q "$beat" "$tmp/a.out" && fail "the leader prints only beats"
retry='^\[[0-2][0-9]:[0-5][0-9]:[0-5][0-9]\] This process ('"$b"') could not acquire lease\. Retrying in 1 seconds\. Host '"$host"'\.$'
[ "$(grep -c "$retry" "$tmp/b.out")" -ge 2 ] || fail "the other worker retries every second"
grep -q "is currently the leader" "$tmp/b.out" && fail "two leaders at once"
[ -s "$tmp/b.err" ] && fail "a worker that does not lead prints nothing on stderr"
"$MUTEXCTL" status "$MUTEXD_RESOURCE" | grep -q "^owner: *[^ ]*:$a$" ||
    fail "the lease's owner is HOST:PID of the leading worker"

start=$(date +%s%N)
kill -TERM "$a"
wait "$a"
rc=$?
[ "$rc" -eq 0 ] || fail "SIGTERM ends the leader with status 0, not $rc"
wait_for grep -q "($b) is currently the leader" "$tmp/b.out" || fail "the other worker takes over"
took=$((($(date +%s%N) - start) / 1000000))
echo "takeover ${took} ms after the leader's SIGTERM"
[ "$took" -lt 5000 ] || fail "the takeover took ${took} ms: the lease was not released"

# A third worker waits; SIGTERM ends it between two tries.
bash "$leader" >"$tmp/c.out" 2>"$tmp/c.err" &
c=$!
pids+=("$c")
wait_for grep -q "($c) could not acquire lease" "$tmp/c.out" || fail "the third worker waits"
kill -TERM "$c"
wait "$c"
rc=$?
[ "$rc" -eq 0 ] || fail "SIGTERM ends a waiting worker with status 0, not $rc"

kill -TERM "$b"
wait "$b"
"$MUTEXCTL" status "$MUTEXD_RESOURCE" | grep -q "^state: *free$" ||
    fail "the last leader released the lease"

for w in a b c; do
    echo "---- worker $w:"
    cat "$tmp/$w.out" "$tmp/$w.err"
done
[ "$failures" -eq 0 ] || exit 1
echo "passed"
