#!/usr/bin/env bash
# mutexctl against a real server: each command's output and exit status, and `run`'s
# contract (environment, exit status, stopping the command's whole group when the lease is
# lost, forwarding signals, releasing on exit).
#
#   with-server.sh test_mutexctl.sh SECTION
#
# Each test_<section> function is one ctest test, next to its own server. MUTEXCTL is the
# tool under test; with-server.sh exports MUTEXD_URL (and MUTEXD_SERVER_PID). A section fails
# when any of its checks does; every failed check is printed with the command's output.
#
# The commands given to `sh -c` are single-quoted on purpose: their $ are the inner shell's.
# shellcheck disable=SC2016
set -uo pipefail

M=${MUTEXCTL:?MUTEXCTL must name the mutexctl to test}
: "${MUTEXD_URL:?run this through with-server.sh}"
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d "${TMPDIR:-/tmp}/mutexctl-test.XXXXXX") || exit 1
# What mutexctl makes of its own (the lease files of `run`) goes in here too, removed at the
# end even when a case kills mutexctl outright.
export TMPDIR="$tmp"
bg_pids=()
# shellcheck disable=SC2317 # run by the EXIT trap
cleanup() {
    local p
    for p in "${bg_pids[@]}"; do
        kill -KILL "$p" 2>/dev/null
    done
    [ -f "$tmp/stopped" ] && kill -CONT "$MUTEXD_SERVER_PID" 2>/dev/null
    rm -rf "$tmp"
}
trap cleanup EXIT
# A test runner's timeout sends SIGTERM: leave through the EXIT trap.
trap 'exit 143' TERM INT HUP
failures=0
rc=0

UUID='[0-9a-f]\{8\}-[0-9a-f]\{4\}-[0-9a-f]\{4\}-[0-9a-f]\{4\}-[0-9a-f]\{12\}'

# m ARGS...: runs mutexctl; stdout in $tmp/out, stderr in $tmp/err, status in $rc.
m() {
    "$M" "$@" >"$tmp/out" 2>"$tmp/err"
    rc=$?
    no_sanitizer_report "$tmp/err" "mutexctl $*"
}

# Sanitizer builds: any report fails the section.
no_sanitizer_report() { # FILE WHAT
    ! grep -q -e "Sanitizer" -e "runtime error:" "$1" 2>/dev/null ||
        fail "$2: a sanitizer report: $(grep -m 3 -e Sanitizer -e 'runtime error:' "$1")"
}

fail() {
    echo "FAIL: $*"
    echo "  stdout: $(sed 's/^/    /' "$tmp/out" 2>/dev/null)"
    echo "  stderr: $(sed 's/^/    /' "$tmp/err" 2>/dev/null)"
    failures=$((failures + 1))
}

expect_rc() { # STATUS WHAT
    [ "$rc" -eq "$1" ] || fail "$2: exit status $rc, want $1"
}

expect_out() { # BASIC-REGEX WHAT: some stdout line matches
    grep -q -- "$1" "$tmp/out" || fail "$2: no stdout line matches '$1'"
}

expect_no_out() { # BASIC-REGEX WHAT
    ! grep -q -- "$1" "$tmp/out" || fail "$2: stdout matches '$1'"
}

expect_err() { # BASIC-REGEX WHAT
    grep -q -- "$1" "$tmp/err" || fail "$2: no stderr line matches '$1'"
}

expect_quiet_err() { # WHAT
    [ ! -s "$tmp/err" ] || fail "$1: stderr is not empty"
}

field() { # NAME: the value of a "name: value" line of the last stdout
    sed -n "s/^$1: *//p" "$tmp/out"
}

now_ms() {
    local s
    s=$(date +%s%N)
    echo $((s / 1000000))
}

# wait_for COMMAND...: until it succeeds, at most 10 s.
wait_for() {
    for _ in $(seq 1 200); do
        "$@" && return 0
        sleep 0.05
    done
    return 1
}

gone() { # PID...: none of them runs (zombies count as gone)
    local p st
    for p in "$@"; do
        st=$(ps -o stat= -p "$p" 2>/dev/null) || continue
        case $st in Z*) ;; *) return 1 ;; esac
    done
    return 0
}

# ---- Sections ---------------------------------------------------------------------------------

test_help() {
    m --help
    expect_rc 0 "--help"
    for word in acquire renew release break status list watch events whoami run "Exit status:" MUTEXD_URL \
        MUTEXD_TOKEN --ca-file --json "500ms, 15s, 2m" "get is the" --limit --shared; do
        expect_out "$word" "--help names $word"
    done
    local cmd
    for cmd in acquire run; do
        m "$cmd" --help
        expect_out "--limit N" "$cmd --help names --limit"
        expect_out "--shared" "$cmd --help names --shared"
    done
    m run --help
    expect_out "mutexctl run --limit 3 jobs/encoder -- ./encode.sh" "run --help's example"
    expect_out "--resource NAME" "run --help names --resource"
    m --help
    expect_out "acquire RESOURCE RESOURCE..." "--help names acquire of several resources"
    expect_out "run --resource A --resource B" "--help names run of several resources"
    m break --help
    expect_out "--lease-id ID" "break --help names --lease-id"
    m get --help
    expect_out "holder: *owner=" "get --help shows a holder line"
    for cmd in acquire renew release break status get list watch events whoami run; do
        m "$cmd" --help
        expect_rc 0 "$cmd --help"
        expect_out "^usage: mutexctl $cmd" "$cmd --help"
        expect_out "Exit status" "$cmd --help"
        m "$cmd" -h
        expect_out "^usage: mutexctl $cmd" "$cmd -h"
    done
    m --version
    expect_rc 0 "--version"
    expect_out "^mutexctl [0-9]" "--version"
    m
    expect_rc 2 "no command"
    expect_err "^usage: mutexctl" "no command"
}

test_usage_errors() {
    m frobnicate
    expect_rc 2 "unknown command"
    expect_err "unknown command 'frobnicate'" "unknown command"
    m status
    expect_rc 2 "status without a resource"
    expect_err "missing RESOURCE" "status without a resource"
    m status a b
    expect_rc 2 "status with two resources"
    m acquire r --nope
    expect_rc 2 "unknown option"
    expect_err "unknown option --nope" "unknown option"
    m acquire r --ttl
    expect_rc 2 "option without its value"
    m acquire r --ttl 5x
    expect_rc 2 "bad duration"
    expect_err "not a duration" "bad duration"
    m list --limit 0
    expect_rc 2 "--limit 0"
    m watch r --count 0
    expect_rc 2 "--count 0"
    m run r
    expect_rc 2 "run without a command"
    expect_err "no command to run" "run without a command"
    m run r --ttl 1ms -- true
    expect_rc 2 "run with a TTL too short to renew"
    m --server ftp://example status r
    expect_rc 2 "a URL that is not http"
    m renew r
    expect_rc 2 "renew without a lease id"
    # Input only the server can judge: refused with 400, which is a usage error too.
    m status 'a//b'
    expect_rc 2 "invalid resource"
    expect_err "invalid_resource, HTTP 400" "invalid resource"
    m acquire r --ttl 100ms
    expect_rc 2 "TTL under the server's minimum"
    expect_err "invalid_ttl, field ttl_ms, HTTP 400" "TTL under the server's minimum"
    m acquire r --metadata '[1]'
    expect_rc 2 "metadata that is not an object"
    # --limit and --shared are checked before anything is sent.
    local cmd rest
    for cmd in acquire run; do
        rest=()
        [ "$cmd" = run ] && rest=(-- touch "$tmp/ran")
        m $cmd r --limit 0 "${rest[@]}"
        expect_rc 2 "$cmd --limit 0"
        expect_err "limit must be a whole number from 1 to 65536, not '0'" "$cmd --limit 0"
        m $cmd r --limit 65537 "${rest[@]}"
        expect_rc 2 "$cmd --limit over 65536"
        m $cmd r --limit three "${rest[@]}"
        expect_rc 2 "$cmd --limit three"
        m $cmd r --shared --limit 2 "${rest[@]}"
        expect_rc 2 "$cmd --shared --limit 2"
        expect_err "does not go with --limit 2" "$cmd --shared --limit 2"
        m $cmd r --shared=yes "${rest[@]}"
        expect_rc 2 "$cmd --shared with a value"
        expect_err "takes no value" "$cmd --shared with a value"
    done
    [ ! -e "$tmp/ran" ] || fail "a refused run must not start the command"
    m status r
    expect_out "^state: *free$" "refused acquires acquire nothing"
}

test_server_and_transport() {
    # MUTEXD_URL is the default server; --server wins over it.
    m status r
    expect_rc 0 "MUTEXD_URL"
    m status r --server http://127.0.0.1:1
    expect_rc 3 "--server wins over MUTEXD_URL"
    expect_err "no answer from the server" "nobody listening"
    local url=$MUTEXD_URL
    MUTEXD_URL=http://127.0.0.1:1 "$M" status r --server "$url" >"$tmp/out" 2>"$tmp/err"
    rc=$?
    expect_rc 0 "--server over a wrong MUTEXD_URL"
    m --server "$MUTEXD_URL/" --token t0ken --timeout 5s status r
    expect_rc 0 "global options before the command, a trailing /, a token"
    MUTEXD_TOKEN=t0ken "$M" status r >"$tmp/out" 2>"$tmp/err"
    rc=$?
    expect_rc 0 "MUTEXD_TOKEN"
    m status r --server "$MUTEXD_URL/elsewhere"
    expect_rc 3 "a path with no API"
    expect_err "not_found, HTTP 404" "a path with no API"
}

test_acquire() {
    m acquire jobs/a --ttl 5s --owner worker-1 --metadata '{"addr":"10.0.0.1:80"}'
    expect_rc 0 "acquire"
    expect_out "^resource: *jobs/a$" "acquire prints the resource"
    expect_out "^lease_id: *$UUID$" "acquire prints the lease id"
    expect_out "^owner: *worker-1$" "acquire prints the owner"
    expect_out "^fencing_token: *[1-9][0-9]*$" "acquire prints the token"
    expect_out "^ttl_ms: *5000$" "acquire prints the TTL"
    expect_out "^expires_in_ms: *[1-9][0-9]*$" "acquire prints the expiry"
    expect_out "^acquired_at: *20" "acquire prints acquired_at"
    expect_out '^metadata: *{"addr":"10.0.0.1:80"}$' "acquire prints the metadata"
    local token
    token=$(field fencing_token)

    m acquire jobs/a --owner worker-2
    expect_rc 1 "acquire while held"
    expect_err "jobs/a is held by worker-1 (fencing token $token, expires in [0-9]* ms)" \
        "acquire while held names the holder"
    [ ! -s "$tmp/out" ] || fail "acquire while held prints nothing on stdout"
    m acquire jobs/a --quiet
    expect_rc 1 "acquire --quiet while held"
    expect_quiet_err "acquire --quiet while held"
    m acquire jobs/a --json
    expect_rc 1 "acquire --json while held"
    expect_out '^{"error":{"code":"lease_held".*"holder":{"owner":"worker-1"' \
        "acquire --json while held prints the API's error"

    m acquire jobs/b --json
    expect_rc 0 "acquire --json"
    expect_out '^{"resource":"jobs/b","lease_id":"'"$UUID"'","owner":"[^"]*:'"$$"'",' \
        "acquire --json prints the lease; the default owner is HOST:PID of the caller"

    local id=6ccb3e43-0489-4885-ac1c-bf894cffbd13
    m acquire jobs/c --lease-id "$id" --ttl 2s
    expect_rc 0 "acquire with a proposed lease id"
    expect_out "^lease_id: *$id$" "the proposed lease id is the lease's"
    token=$(field fencing_token)
    m acquire jobs/c --lease-id "$id" --ttl 3s
    expect_rc 0 "acquire again with the same lease id"
    expect_out "^fencing_token: *$token$" "the same lease id gives the same lease"
    expect_out "^ttl_ms: *3000$" "with the new TTL"

    m acquire jobs/d --ttl 1s
    local t0 t1
    t0=$(now_ms)
    m acquire jobs/d --wait 5s --owner patient
    t1=$(now_ms)
    expect_rc 0 "acquire --wait until the holder's lease expires"
    expect_out "^owner: *patient$" "acquire --wait"
    [ $((t1 - t0)) -ge 500 ] || fail "acquire --wait came back after $((t1 - t0)) ms, before the holder's TTL"
    m acquire jobs/d --wait 300ms
    expect_rc 1 "acquire --wait that runs out"
}

test_renew() {
    m acquire r --ttl 2s --metadata '{"v":1}'
    local id token
    id=$(field lease_id)
    token=$(field fencing_token)
    m renew r "$id" --ttl 4s
    expect_rc 0 "renew"
    expect_out "^lease_id: *$id$" "renew keeps the lease"
    expect_out "^fencing_token: *$token$" "renew keeps the token"
    expect_out "^ttl_ms: *4000$" "renew sets the TTL"
    expect_out '^metadata: *{"v":1}$' "renew keeps the metadata"
    m renew r "$id" --metadata '{"v":2}' --json
    expect_rc 0 "renew --json --metadata"
    expect_out '^{"resource":"r","lease_id":"'"$id"'".*"ttl_ms":4000.*"metadata":{"v":2},"limit":1,"shared":false}$' \
        "renew --json prints the lease with the new metadata"
    m renew r 00000000-0000-4000-8000-000000000000
    expect_rc 1 "renew someone else's lease"
    expect_err "the lease is lost" "renew a lost lease"
    m renew r 00000000-0000-4000-8000-000000000000 --json
    expect_rc 1 "renew --json a lost lease"
    expect_out '"code":"lease_lost"' "renew --json a lost lease prints the API's error"
    m renew r not-a-uuid
    expect_rc 2 "renew with a malformed lease id"
    expect_err "invalid_lease_id" "renew with a malformed lease id"
}

test_release() {
    m acquire r
    local id
    id=$(field lease_id)
    m release r "$id"
    expect_rc 0 "release"
    expect_out "^released r$" "release"
    m status r
    expect_out "^state: *free$" "released: free"
    m release r "$id"
    expect_rc 1 "release twice"
    expect_err "the lease is lost" "release twice"
    m acquire r
    id=$(field lease_id)
    m release r "$id" --json
    expect_rc 0 "release --json"
    expect_out '^{"resource":"r","released":true}$' "release --json"
}

test_break() {
    m break r
    expect_rc 0 "break a free resource"
    expect_out "^r was not held$" "break a free resource"
    m break r --json
    expect_out '^{"resource":"r","broken":false}$' "break --json a free resource"
    m acquire r
    local id
    id=$(field lease_id)
    m break r --reason "maintenance window"
    expect_rc 0 "break"
    expect_out "^broken r$" "break"
    m renew r "$id"
    expect_rc 1 "renew after a break"
    m acquire r
    m break r --json
    expect_out '^{"resource":"r","broken":true}$' "break --json"
}

test_status() {
    m status never/used
    expect_rc 0 "status of a free resource"
    expect_out "^holders: *0$" "a free resource has no holders"
    expect_no_out "^holder:" "a free resource has no holder lines"
    expect_out "^resource: *never/used$" "status"
    expect_out "^state: *free$" "status free"
    expect_out "^index: *[0-9][0-9]*$" "status index"
    expect_out "^waiters: *0$" "status waiters"
    expect_no_out "^owner:" "a free resource has no owner"
    m acquire held/one --owner me --ttl 9s --metadata '{"k":"v"}'
    local id token
    id=$(field lease_id)
    token=$(field fencing_token)
    m status held/one
    expect_out "^state: *held$" "status held"
    expect_out "^owner: *me$" "status owner"
    expect_out "^fencing_token: *$token$" "status token"
    expect_out "^ttl_ms: *9000$" "status TTL"
    expect_out '^metadata: *{"k":"v"}$' "status metadata"
    expect_no_out "$id" "status never shows the lease id"
    expect_out "^limit: *1$" "status limit"
    expect_out "^holders: *1$" "status holders"
    expect_out "^holder: *owner=me fencing_token=$token exclusive expires_in_ms=[0-9]*$" \
        "status prints a line per holder"
    m get held/one
    expect_rc 0 "get"
    expect_out "^holder: *owner=me fencing_token=$token exclusive" "get is status"
    m acquire held/two --owner "two words"
    m status held/two
    expect_out '^holder: *owner="two words" fencing_token=' "an owner with blanks is quoted"
    m status held/one --json
    expect_out '^{"resource":"held/one","state":"held","index":[0-9]*,"limit":1,"holder":{"owner":"me",' \
        "status --json"
    expect_no_out "$id" "status --json never shows the lease id"
}

test_list() {
    m acquire jobs/b --owner w-b
    m acquire jobs/a --owner w-a --ttl 60s
    m acquire other --owner w-o
    m list
    expect_rc 0 "list"
    sed -n 1p "$tmp/out" | grep -q '^RESOURCE  *OWNER  *FENCING_TOKEN  *EXPIRES_IN_MS  *WAITERS$' ||
        fail "list prints a header"
    [ "$(awk 'NR>1 {print $1}' "$tmp/out" | tr '\n' ' ')" = "jobs/a jobs/b other " ] ||
        fail "list prints every held resource in name order"
    expect_out '^jobs/a  *w-a  *[0-9][0-9]*  *[0-9][0-9]*  *0$' "list prints a row"
    m list --prefix jobs/
    [ "$(awk 'NR>1 {print $1}' "$tmp/out" | tr '\n' ' ')" = "jobs/a jobs/b " ] ||
        fail "list --prefix"
    m list --prefix jobs/ --limit 1
    expect_rc 0 "list --limit"
    [ "$(awk 'NR>1 {print $1}' "$tmp/out" | tr '\n' ' ')" = "jobs/a " ] || fail "list --limit 1"
    expect_err "^next cursor: jobs/a$" "list --limit gives the next cursor"
    m list --prefix jobs/ --limit 1 --cursor jobs/a
    [ "$(awk 'NR>1 {print $1}' "$tmp/out" | tr '\n' ' ')" = "jobs/b " ] || fail "list --cursor"
    m list --json
    expect_rc 0 "list --json"
    expect_out '^{"resources":\[{"resource":"jobs/a".*{"resource":"jobs/b".*{"resource":"other".*\],"next_cursor":null}$' \
        "list --json"
    m list --json --limit 1
    expect_out '^{"index":[0-9]*,"resources":\[{"resource":"jobs/a".*\],"next_cursor":"jobs/a"}$' \
        "list --json --limit: one page, as the API answers it (with the change index)"
    m list --prefix nothing/
    expect_rc 0 "list of nothing"
    [ "$(wc -l <"$tmp/out")" -eq 1 ] || fail "list of nothing prints the header alone"
}

test_watch() {
    "$M" watch w --count 3 >"$tmp/watch" 2>"$tmp/watch.err" &
    local watcher=$!
    bg_pids+=("$watcher")
    wait_for grep -q "state=free" "$tmp/watch" || fail "watch prints the state first"
    m acquire w --owner "the leader" --ttl 5s
    local id
    id=$(field lease_id)
    wait_for grep -q "state=held" "$tmp/watch" || fail "watch prints the grant"
    m release w "$id"
    wait_for sh -c "! kill -0 $watcher 2>/dev/null" || fail "watch --count 3 stops after 3 states"
    wait "$watcher"
    rc=$?
    cp "$tmp/watch" "$tmp/out"
    cp "$tmp/watch.err" "$tmp/err"
    expect_rc 0 "watch --count"
    [ "$(wc -l <"$tmp/out")" -eq 3 ] || fail "watch printed $(wc -l <"$tmp/out") lines, want 3"
    sed -n 1p "$tmp/out" | grep -q '^index=[0-9]* state=free waiters=0$' || fail "watch line 1"
    sed -n 2p "$tmp/out" | grep -q '^index=[0-9]* state=held owner="the leader" fencing_token=[0-9]* ttl_ms=5000 expires_in_ms=[0-9]* waiters=0$' ||
        fail "watch line 2"
    sed -n 3p "$tmp/out" | grep -q '^index=[0-9]* state=free waiters=0$' || fail "watch line 3"
    local i1 i2 i3
    i1=$(sed -n '1s/^index=\([0-9]*\).*/\1/p' "$tmp/out")
    i2=$(sed -n '2s/^index=\([0-9]*\).*/\1/p' "$tmp/out")
    i3=$(sed -n '3s/^index=\([0-9]*\).*/\1/p' "$tmp/out")
    if ! [ "$i1" -lt "$i2" ] || ! [ "$i2" -lt "$i3" ]; then
        fail "watch indexes increase: $i1 $i2 $i3"
    fi

    # --index: nothing until the index differs; a stale one answers at once.
    "$M" watch w --index "$i3" --wait 700ms --count 1 >"$tmp/watch2" 2>&1 &
    local w2=$!
    bg_pids+=("$w2")
    sleep 1.2
    kill -0 "$w2" 2>/dev/null || fail "watch --index waits for a change"
    [ ! -s "$tmp/watch2" ] || fail "watch --index prints nothing until a change"
    m acquire w --owner second
    wait "$w2"
    grep -q '^index=[0-9]* state=held owner=second ' "$tmp/watch2" ||
        fail "watch --index prints the change"
    m watch w --index 0 --count 1 --json
    expect_rc 0 "watch --index with a stale index"
    expect_out '^{"resource":"w","state":"held",' "watch --json prints the API's state"
    m watch 'a//b' --count 1
    expect_rc 2 "watch an invalid name"
}

# watch --prefix (and watch PREFIX/): the list first, then the list again at each change
# under the prefix, never for a change elsewhere; SIGINT ends it cleanly.
test_watch_prefix() {
    m acquire jobs/a --owner alice --ttl 10s
    "$M" watch jobs/ --wait 5s >"$tmp/wp" 2>"$tmp/wp.err" &
    local watcher=$!
    bg_pids+=("$watcher")
    wait_for grep -q "^index=[0-9]* held=1$" "$tmp/wp" || fail "watch jobs/ prints the list first"
    grep -q "^RESOURCE  *LIMIT  *OWNER  *FENCING_TOKEN  *MODE  *EXPIRES_IN_MS  *WAITERS$" \
        "$tmp/wp" || fail "watch jobs/ prints a table's header"
    grep -q "^jobs/a  *1  *alice  *[0-9][0-9]*  *exclusive  *[0-9][0-9]*  *0$" "$tmp/wp" ||
        fail "watch jobs/ prints a row for the holder"
    m acquire other/x --owner elsewhere
    sleep 1
    [ "$(grep -c '^index=' "$tmp/wp")" -eq 1 ] || fail "watch jobs/ prints nothing for other/x"
    m acquire jobs/b --owner bob --limit 2
    wait_for grep -q "^index=[0-9]* held=2$" "$tmp/wp" || fail "watch jobs/ prints a grant"
    grep -q "^jobs/b  *2  *bob " "$tmp/wp" || fail "watch jobs/ prints the new holder's row"
    ! grep -q "other/x" "$tmp/wp" || fail "watch jobs/ shows a resource of another prefix"
    kill -INT "$watcher"
    wait "$watcher"
    rc=$?
    cp "$tmp/wp" "$tmp/out"
    cp "$tmp/wp.err" "$tmp/err"
    expect_rc 0 "watch jobs/ ends on SIGINT"
    [ ! -s "$tmp/err" ] || fail "watch jobs/ says nothing on stderr"
    local i1 i2
    i1=$(sed -n 's/^index=\([0-9]*\) held=1$/\1/p' "$tmp/out")
    i2=$(sed -n 's/^index=\([0-9]*\) held=2$/\1/p' "$tmp/out")
    { [ -n "$i1" ] && [ -n "$i2" ] && [ "$i1" -lt "$i2" ]; } || fail "watch indexes increase: $i1 $i2"

    # --json: one line per list; a break empties it; --count stops.
    "$M" watch --prefix jobs/b --json --count 2 >"$tmp/wj" 2>&1 &
    local w2=$!
    bg_pids+=("$w2")
    wait_for grep -q '^{"index":[0-9]*,"resources":\[{"resource":"jobs/b",' "$tmp/wj" ||
        fail "watch --prefix --json prints the list first"
    m break jobs/b
    wait "$w2"
    rc=$?
    cp "$tmp/wj" "$tmp/out"
    expect_rc 0 "watch --prefix --count 2"
    [ "$(wc -l <"$tmp/out")" -eq 2 ] || fail "watch --json printed $(wc -l <"$tmp/out") lines"
    sed -n 2p "$tmp/out" | grep -q '^{"index":[0-9]*,"resources":\[\]}$' ||
        fail "watch --json: the break empties the list"

    m watch jobs/ --prefix jobs/
    expect_rc 2 "watch with RESOURCE and --prefix"
    m watch --prefix jobs/ --index 3
    expect_rc 2 "watch --prefix with --index"
    m watch
    expect_rc 2 "watch with nothing to watch"
}

# events: every change in order, logfmt or JSON, --after and --prefix; --follow prints a
# later change; whoami with authorization off.
test_events_and_whoami() {
    m acquire ev/a --owner alice --ttl 5s
    local id
    id=$(field lease_id)
    m renew ev/a "$id"
    m release ev/a "$id"
    m acquire other/b --owner "bob b" --shared
    m events
    expect_rc 0 "events"
    [ "$(wc -l <"$tmp/out")" -eq 4 ] || fail "events printed $(wc -l <"$tmp/out") lines, want 4"
    local at='[0-9-]*T[0-9:.]*Z'
    sed -n 1p "$tmp/out" | grep -q "^index=[0-9]* at=$at resource=ev/a type=granted owner=alice fencing_token=[0-9]* shared=false limit=1$" ||
        fail "events line 1"
    sed -n 2p "$tmp/out" | grep -q " resource=ev/a type=renewed " || fail "events line 2"
    sed -n 3p "$tmp/out" | grep -q " resource=ev/a type=released " || fail "events line 3"
    sed -n 4p "$tmp/out" | grep -q ' resource=other/b type=granted owner="bob b" .* shared=true ' ||
        fail "events line 4"
    ! grep -q "$id" "$tmp/out" || fail "events show a lease id"
    local i1 i2
    i1=$(sed -n '1s/^index=\([0-9]*\) .*/\1/p' "$tmp/out")
    i2=$(sed -n '2s/^index=\([0-9]*\) .*/\1/p' "$tmp/out")
    m events --after "$i1" --limit 1
    [ "$(wc -l <"$tmp/out")" -eq 3 ] || fail "events --after --limit 1 reads every page"
    expect_out "^index=$i2 " "events --after starts after it"
    m events --prefix other/ --json
    [ "$(wc -l <"$tmp/out")" -eq 1 ] || fail "events --prefix other/"
    expect_out '^{"index":[0-9]*,"at":"[^"]*","resource":"other/b","type":"granted","owner":"bob b",' \
        "events --json prints the API's event"
    m events --count 2
    [ "$(wc -l <"$tmp/out")" -eq 2 ] || fail "events --count 2"

    "$M" events --follow --prefix ev/ --wait 2s >"$tmp/ef" 2>"$tmp/ef.err" &
    local follower=$!
    bg_pids+=("$follower")
    wait_for grep -q "type=released" "$tmp/ef" || fail "events --follow prints what is there"
    m acquire other/c
    m acquire ev/later --owner later
    wait_for grep -q "resource=ev/later type=granted owner=later " "$tmp/ef" ||
        fail "events --follow prints a later change"
    ! grep -q "other/" "$tmp/ef" || fail "events --follow --prefix shows another prefix"
    kill -INT "$follower"
    wait "$follower"
    rc=$?
    cp "$tmp/ef" "$tmp/out"
    cp "$tmp/ef.err" "$tmp/err"
    expect_rc 0 "events --follow ends on SIGINT"
    [ ! -s "$tmp/err" ] || fail "events --follow says nothing on stderr"

    m events --after x
    expect_rc 2 "events --after x"
    m events --limit 0
    expect_rc 2 "events --limit 0"

    m whoami
    expect_rc 0 "whoami"
    expect_out '^name=- scopes=read,write,admin,metrics$' "whoami with authorization off"
    m whoami --json
    expect_out '^{"name":null,"scopes":\["read","write","admin","metrics"\]}$' "whoami --json"
}

# events with a small history: --after a dropped index warns on stderr that changes were
# missed, and starts at the oldest kept.
test_events_truncated() {
    cat >"$tmp/truncated.sh" <<EOF
set -u
for i in 1 2 3 4 5; do "$M" acquire t/\$i >/dev/null || exit 2; done
"$M" events >"$tmp/t.out" 2>"$tmp/t.err" || exit 3
[ "\$(wc -l <"$tmp/t.out")" -eq 2 ] || exit 4
[ ! -s "$tmp/t.err" ] || exit 5
"$M" events --after 1 >"$tmp/t.out" 2>"$tmp/t.err" || exit 6
grep -q "^index=4 .*resource=t/4 " "$tmp/t.out" || exit 7
grep -q "warning: changes after index 1 were dropped" "$tmp/t.err" || exit 8
"$M" events --after 4 >"$tmp/t.out" 2>"$tmp/t.err" || exit 9
[ ! -s "$tmp/t.err" ] || exit 10
exit 0
EOF
    MUTEXD_SERVER_ARGS="--event-history 2" \
        "$here/with-server.sh" bash "$tmp/truncated.sh" >"$tmp/out" 2>"$tmp/err"
    rc=$?
    cp "$tmp/t.err" "$tmp/err" 2>/dev/null
    expect_rc 0 "events with a dropped index (step $rc failed)"
}

# The command's environment and exit status, and the release when it exits.
test_run_environment_and_status() {
    m run jobs/env --ttl 10s -- sh -c 'env | grep "^MUTEXD_" | sort > "$0"' "$tmp/env"
    expect_rc 0 "run"
    grep -q "^MUTEXD_RESOURCE=jobs/env$" "$tmp/env" || fail "run sets MUTEXD_RESOURCE"
    grep -q "^MUTEXD_LEASE_ID=$UUID$" "$tmp/env" || fail "run sets MUTEXD_LEASE_ID"
    grep -q "^MUTEXD_FENCING_TOKEN=[1-9][0-9]*$" "$tmp/env" || fail "run sets MUTEXD_FENCING_TOKEN"
    m status jobs/env
    expect_out "^state: *free$" "run releases the lease when the command exits"

    # While it runs: held under mutexctl's HOST:PID, with the token the command was given.
    "$M" run jobs/env --ttl 10s -- sh -c 'echo "$MUTEXD_FENCING_TOKEN" > "$0"; sleep 2' \
        "$tmp/token" 2>"$tmp/err" &
    local runner=$!
    bg_pids+=("$runner")
    wait_for test -s "$tmp/token" || fail "the command started"
    m status jobs/env
    expect_out "^state: *held$" "held while the command runs"
    expect_out "^owner: *[^ ]*:$runner$" "the default owner is HOST:PID of mutexctl"
    expect_out "^fencing_token: *$(cat "$tmp/token")$" "the command has the lease's token"
    wait "$runner"

    m run r -- sh -c 'exit 7'
    expect_rc 7 "run exits with the command's status"
    m run r -- sh -c 'kill -USR1 $$'
    expect_rc 138 "run exits 128+N when signal N ended the command"
    m run r -- "$tmp/no-such-command"
    expect_rc 127 "run of a command that does not exist"
    expect_err "cannot run" "run of a command that does not exist"
    printf 'not executable\n' >"$tmp/plain"
    m run r -- "$tmp/plain"
    expect_rc 126 "run of a file that is not executable"
    m status r
    expect_out "^state: *free$" "released after each run"
    # Without "--", the command starts at the first word after RESOURCE.
    m run r --ttl 2s sh -c 'echo "$1"' sh --ttl
    expect_rc 0 "run without --"
    expect_out "^--ttl$" "the command's own words are left alone"
}

test_run_held_and_wait() {
    m acquire busy --ttl 1500ms --owner holder
    m run busy -- touch "$tmp/ran"
    expect_rc 1 "run while held"
    expect_err "busy is held by holder" "run while held"
    [ ! -e "$tmp/ran" ] || fail "run while held must not start the command"
    m run busy --quiet -- true
    expect_rc 1 "run --quiet while held"
    expect_quiet_err "run --quiet while held"
    local t0 t1
    t0=$(now_ms)
    m run busy --wait 10s --ttl 1s -- sh -c 'sleep 1.5; touch "$0"' "$tmp/ran"
    t1=$(now_ms)
    expect_rc 0 "run --wait"
    [ -e "$tmp/ran" ] || fail "run --wait runs the command once the lease is free"
    # The command ran longer than its TTL: only renewals kept the lease.
    [ $((t1 - t0)) -ge 1500 ] || fail "run --wait came back after $((t1 - t0)) ms"
    m status busy
    expect_out "^state: *free$" "run --wait releases"
    m run busy --wait 1s --server http://127.0.0.1:1 -- true
    expect_rc 3 "run with no server"
}

# ---- Semaphores and shared leases ----


test_semaphore_acquire_get_break() {
    local ids=() tokens=() i
    for i in 1 2 3; do
        m acquire jobs/encoder --limit 3 --owner "enc-$i" --ttl 10s
        expect_rc 0 "acquire --limit 3 ($i)"
        expect_out "^limit: *3$" "the lease says its limit"
        expect_out "^shared: *false$" "a semaphore's lease is not shared"
        ids+=("$(field lease_id)")
        tokens+=("$(field fencing_token)")
    done
    m acquire jobs/encoder --limit 3 --owner enc-4
    expect_rc 1 "acquire --limit 3 when three hold it"
    expect_err "jobs/encoder is held by enc-1 (fencing token ${tokens[0]}," \
        "held names the holder whose lease ends first"
    m acquire jobs/encoder --limit 2
    expect_rc 3 "acquire under another limit"
    expect_err "under limit 3, not the limit asked for (limit_mismatch" "limit_mismatch says the limit"
    m acquire jobs/encoder
    expect_rc 3 "acquire without --limit on a semaphore"
    m acquire jobs/encoder --limit 2 --json
    expect_out '"code":"limit_mismatch".*"limit":3' "--json prints the API's error"

    m get jobs/encoder
    expect_rc 0 "get a semaphore"
    expect_out "^limit: *3$" "get: the limit"
    expect_out "^holders: *3$" "get: three holders"
    [ "$(grep -c '^holder:' "$tmp/out")" -eq 3 ] || fail "get: one line per holder"
    for i in 0 1 2; do
        expect_out "^holder: *owner=enc-$((i + 1)) fencing_token=${tokens[$i]} exclusive expires_in_ms=[0-9]*$" \
            "get: holder $((i + 1)), oldest first"
        expect_no_out "${ids[$i]}" "get never shows a lease id"
    done
    m status jobs/encoder --json
    expect_out '"holders":\[{"owner":"enc-1"' "status --json has the holders"

    m break jobs/encoder --lease-id "${ids[1]}" --reason "stuck"
    expect_rc 0 "break --lease-id"
    expect_out "^broken jobs/encoder$" "break --lease-id"
    m get jobs/encoder
    expect_out "^holders: *2$" "one lease broken, two left"
    expect_no_out "owner=enc-2 " "the broken lease is gone"
    m renew jobs/encoder "${ids[1]}"
    expect_rc 1 "renew a broken lease of a semaphore"
    m renew jobs/encoder "${ids[0]}"
    expect_rc 0 "the others keep theirs"
    m break jobs/encoder --lease-id "${ids[1]}"
    expect_rc 0 "break --lease-id of a lease that holds nothing"
    expect_out "^jobs/encoder: lease ${ids[1]} was not held$" "break --lease-id, not held"
    m break jobs/encoder --lease-id "${ids[1]}" --json
    expect_out '^{"resource":"jobs/encoder","broken":false}$' "break --lease-id --json"
    m break jobs/encoder
    expect_out "^broken jobs/encoder$" "break without --lease-id ends them all"
    m get jobs/encoder
    expect_out "^state: *free$" "all broken"
    expect_out "^holders: *0$" "all broken: no holders"
}

test_semaphore_shared() {
    m acquire cache --shared --owner reader-1
    expect_rc 0 "acquire --shared"
    expect_out "^shared: *true$" "a shared lease says so"
    local r1
    r1=$(field lease_id)
    m acquire cache --shared --owner reader-2
    expect_rc 0 "a second reader"
    m acquire cache --owner writer
    expect_rc 1 "a writer while readers hold it"
    m get cache
    expect_out "^holder: *owner=reader-1 fencing_token=[0-9]* shared expires_in_ms=" "get: reader 1"
    expect_out "^holder: *owner=reader-2 fencing_token=[0-9]* shared expires_in_ms=" "get: reader 2"
    # A reader runs alongside the others; a writer does not.
    m run cache --shared -- touch "$tmp/read"
    expect_rc 0 "run --shared while readers hold it"
    [ -e "$tmp/read" ] || fail "run --shared runs the command"
    m run cache -- touch "$tmp/wrote"
    expect_rc 1 "run (a writer) while readers hold it"
    [ ! -e "$tmp/wrote" ] || fail "a writer must not run while readers hold it"
    m break cache --lease-id "$r1"
    m break cache
    m run cache -- touch "$tmp/wrote"
    expect_rc 0 "the writer runs once the readers are gone"
}

# The worked example of docs/clients.md: at most three encoders at once.
test_semaphore_run_limit() {
    local i pids=() running
    for i in 1 2 3 4 5; do
        # Each encoder marks itself running with a file of its own while it works, and
        # writes down how many such files it saw.
        "$M" run --limit 3 --wait 20s --ttl 2s jobs/encoder -- \
            sh -c 'touch "$0/on.$$"; ls "$0" | grep -c "^on\." >>"$0/max"; sleep 0.7;
                   ls "$0" | grep -c "^on\." >>"$0/max"; rm "$0/on.$$";
                   echo "$MUTEXD_FENCING_TOKEN" >>"$0/done"' "$tmp" \
            >"$tmp/run-$i.out" 2>&1 &
        pids+=("$!")
        bg_pids+=("$!")
    done
    for i in "${!pids[@]}"; do
        wait "${pids[$i]}" || fail "run --limit 3 ($((i + 1))) exited $?: $(cat "$tmp/run-$((i + 1)).out")"
    done
    [ "$(wc -l <"$tmp/done")" -eq 5 ] || fail "every encoder ran once"
    running=$(sort -n "$tmp/max" | tail -n 1)
    [ "$running" -le 3 ] || fail "at most three encoders at once, saw $running"
    [ "$running" -ge 2 ] || fail "encoders ran together, saw at most $running"
    m get jobs/encoder
    expect_out "^state: *free$" "run --limit releases its place"
    m run jobs/encoder --limit 2 -- true
    expect_rc 0 "a free semaphore takes a new limit"
}

# Several servers (--url, MUTEXD_URL, --server): a dead port before the real server, and a
# `run` that keeps its lease when the server it renews through goes away (a relay in front
# of the real server, killed while the command runs).
test_several_servers() {
    command -v python3 >/dev/null || {
        echo "SKIP: no python3 for the relay"
        exit 77
    }
    local dead dead2
    dead=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    dead2=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    m --url "http://127.0.0.1:$dead,$MUTEXD_URL" acquire ha/a --ttl 5s --owner first
    expect_rc 0 "acquire with a dead server first in --url"
    expect_out "^fencing_token: *[1-9][0-9]*$" "acquire with a dead server first in --url"
    expect_quiet_err "acquire with a dead server first in --url"
    MUTEXD_URL="http://127.0.0.1:$dead, $MUTEXD_URL" "$M" status ha/a >"$tmp/out" 2>"$tmp/err"
    rc=$?
    expect_rc 0 "status with a dead server first in MUTEXD_URL"
    expect_out "^owner: *first$" "status with a dead server first in MUTEXD_URL"
    m status ha/a --server "http://127.0.0.1:$dead,$MUTEXD_URL"
    expect_rc 0 "--server takes a list too"
    m --url "http://127.0.0.1:$dead,http://127.0.0.1:$dead2" status ha/a
    expect_rc 3 "no server answers"
    expect_err "127.0.0.1:$dead2" "the error is the last server's"
    m --url "$MUTEXD_URL,ftp://127.0.0.1:$dead" status ha/a
    expect_rc 2 "a list with a URL that is not http"
    m --url "$MUTEXD_URL," status ha/a
    expect_rc 2 "a list with an empty item"

    cat >"$tmp/relay.py" <<'EOF'
import os, socket, sys, threading
upstream, out = int(sys.argv[1]), sys.argv[2]
listener = socket.socket()
listener.bind(("127.0.0.1", 0))
listener.listen(16)
with open(out + ".new", "w") as f:
    f.write(str(listener.getsockname()[1]))
os.rename(out + ".new", out)
def pipe(a, b):
    try:
        while True:
            data = a.recv(65536)
            if not data:
                break
            b.sendall(data)
    except OSError:
        pass
    for s in (a, b):
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
count = 0
while True:
    c, _ = listener.accept()
    u = socket.create_connection(("127.0.0.1", upstream))
    count += 1
    with open(out + ".count", "w") as f:
        f.write(str(count))
    threading.Thread(target=pipe, args=(c, u), daemon=True).start()
    threading.Thread(target=pipe, args=(u, c), daemon=True).start()
EOF
    python3 "$tmp/relay.py" "${MUTEXD_URL##*:}" "$tmp/relay" &
    local relay=$!
    bg_pids+=("$relay")
    wait_for test -s "$tmp/relay" || fail "the relay started"
    local ttl_ms=1500
    "$M" run ha/run --url "http://127.0.0.1:$(cat "$tmp/relay"),$MUTEXD_URL" --ttl "${ttl_ms}ms" \
        -- sh -c 'echo "$MUTEXD_FENCING_TOKEN" > "$1"; while [ ! -e "$2" ]; do sleep 0.05; done
                  "$0" check' "$M" "$tmp/token" "$tmp/done" >"$tmp/out" 2>"$tmp/err" &
    local runner=$!
    bg_pids+=("$runner")
    wait_for test -s "$tmp/token" || fail "the command started"
    [ "$(cat "$tmp/relay.count" 2>/dev/null)" -ge 1 ] || fail "run went through the relay first"
    sleep 1 # renewals through the relay
    kill -KILL "$relay"
    wait "$relay" 2>/dev/null
    sleep $((ttl_ms * 2 / 1000)) # past the deadline of the relay's last renewal
    "$M" status ha/run >"$tmp/status" 2>&1
    grep -q "^fencing_token: *$(cat "$tmp/token")$" "$tmp/status" ||
        fail "the lease is still the command's after the relay went away: $(cat "$tmp/status")"
    touch "$tmp/done"
    wait "$runner"
    rc=$?
    expect_rc 0 "run whose first server went away: the command's check passed at its end"
    ! grep -q "lost\|deadline" "$tmp/err" || fail "run thought the lease lost: $(cat "$tmp/err")"
    m status ha/run
    expect_out "^state: *free$" "released at the end, through the server that answers"
}

# A script that ignores SIGTERM and starts a grandchild that ignores it too: only the whole
# group's SIGKILL stops them. They write their PIDs to $0.child and $0.grandchild once their
# traps are set.
stubborn='trap "echo term >> $0.log" TERM
sh -c '\''trap "" TERM; echo $$ > "$1.grandchild"; exec sleep 300'\'' sh "$0" &
echo $$ > $0.child
while :; do sleep 0.05; done'

# Waits for the stubborn script of prefix $1 to be ready.
stubborn_ready() {
    wait_for test -s "$1.grandchild" && wait_for test -s "$1.child"
}

# run_stubborn ARGS...: `mutexctl run ARGS... -- <the stubborn script>` in the background
# (stdout and stderr in $tmp/out and $tmp/err), once the script is ready. Sets runner, child
# and grandchild, which the caller declares local.
run_stubborn() {
    "$M" run "$@" -- sh -c "$stubborn" "$tmp/s" >"$tmp/out" 2>"$tmp/err" &
    runner=$!
    bg_pids+=("$runner")
    stubborn_ready "$tmp/s" || fail "the command started"
    child=$(cat "$tmp/s.child")
    grandchild=$(cat "$tmp/s.grandchild")
}

# break_stubborn RESOURCE TTL_MS GRACE_MS: breaks the lease on RESOURCE under run_stubborn's
# command, and checks that run stops the command's whole group in time: SIGTERM first, then
# SIGKILL once the grace is over, within TTL/3 + grace (and 1.5 s) of the break. rc: run's
# exit status.
break_stubborn() {
    local ttl_ms=$2 grace_ms=$3
    # t0 before the break: the runner may see the lease lost (and send SIGTERM) before the
    # break command itself has exited, so a t0 taken after it can be late by its exit time.
    local t0 t1
    t0=$(now_ms)
    "$M" break "$1" >/dev/null
    if ! wait_for gone "$child" "$grandchild"; then
        fail "the command's group outlived the lease"
        kill -KILL "$child" "$grandchild" 2>/dev/null # so that the runner ends
    fi
    t1=$(now_ms)
    wait "$runner"
    rc=$?
    grep -q term "$tmp/s.log" 2>/dev/null || fail "the group got SIGTERM before SIGKILL"
    local took=$((t1 - t0)) most=$((ttl_ms / 3 + grace_ms + 1500))
    echo "group stopped ${took} ms after the break (TTL/3 + grace = $((ttl_ms / 3 + grace_ms)) ms)"
    [ "$took" -le "$most" ] || fail "the group was stopped ${took} ms after the break, over $most"
    [ "$took" -ge "$grace_ms" ] || fail "SIGKILL came ${took} ms after the break, before the grace"
}

test_run_stops_the_group_when_the_lease_is_broken() {
    local runner child grandchild
    run_stubborn lost --ttl 1500ms --grace 1000ms
    sleep 0.3
    break_stubborn lost 1500 1000
    expect_rc 1 "run whose lease was broken"
    expect_err "the lease on lost is lost (lease_lost)" "run says the lease is lost"
}

test_run_stops_the_group_when_renewals_fail() {
    local ttl_ms=1500 grace_ms=500 runner child grandchild
    run_stubborn unreachable --ttl "${ttl_ms}ms" --grace "${grace_ms}ms" --timeout 1s
    # The server stops answering: every renewal times out.
    touch "$tmp/stopped"
    kill -STOP "$MUTEXD_SERVER_PID"
    local t0 t1
    t0=$(now_ms)
    wait_for gone "$child" "$grandchild" || fail "the command's group outlived the lease's deadline"
    t1=$(now_ms)
    kill -CONT "$MUTEXD_SERVER_PID"
    rm -f "$tmp/stopped"
    wait "$runner"
    rc=$?
    expect_rc 1 "run whose renewals failed"
    expect_err "renewing unreachable failed" "run reports failed renewals"
    expect_err "no renewal of unreachable succeeded before the lease's deadline" \
        "run says the lease ran out"
    local took=$((t1 - t0)) most=$((ttl_ms + grace_ms + 1500))
    echo "group stopped ${took} ms after the server stopped answering"
    [ "$took" -le "$most" ] || fail "the group was stopped ${took} ms after the server stopped, over $most"
    [ "$took" -ge $((ttl_ms * 2 / 3 + grace_ms - 200)) ] ||
        fail "the group was stopped ${took} ms after the server stopped: before the lease ended"
}

test_run_check_and_parent() {
    # The command checks its lease with `mutexctl check`, which reads the deadline mutexctl
    # keeps in MUTEXD_LEASE_FILE; the file is gone when run ends.
    m run jobs/check --ttl 3s -- sh -c 'echo "$MUTEXD_LEASE_FILE" > "$1"; "$0" check && echo held >> "$1"' \
        "$M" "$tmp/check"
    expect_rc 0 "run with a command that checks"
    [ "$(sed -n 2p "$tmp/check")" = held ] || fail "mutexctl check says held while the lease holds"
    lease_file=$(sed -n 1p "$tmp/check")
    [ -n "$lease_file" ] || fail "run sets MUTEXD_LEASE_FILE"
    [ ! -e "$lease_file" ] || fail "the lease file is removed when run ends"
    (unset MUTEXD_LEASE_FILE; "$M" check >"$tmp/out" 2>"$tmp/err")
    rc=$?
    expect_rc 2 "check outside run, without --lease-file"
    printf '1\n' >"$tmp/past"
    m check --lease-file "$tmp/past"
    expect_rc 1 "check of a deadline long past"
    expect_err "lost" "check of a deadline long past"
    echo 0 >"$tmp/past"
    m check --lease-file "$tmp/past"
    expect_rc 1 "check of a lost lease"
    m check --lease-file "$tmp/no-such-file"
    expect_rc 1 "check without a lease file"

    # --parent-pid: when the parent dies, even by SIGKILL, the command is stopped and the
    # lease released at once (not when its TTL runs out).
    m run jobs/parent --parent-pid 1 -- true
    expect_rc 1 "run whose --parent-pid is not its parent"
    expect_err "is gone" "run whose --parent-pid is not its parent"
    m run jobs/parent --parent-pid x -- true
    expect_rc 2 "run with a --parent-pid that is not a number"
    bash -c '"$0" run jobs/parent --ttl 20s --parent-pid $$ -- sleep 60 & wait' "$M" \
        >"$tmp/out" 2>"$tmp/err" &
    local parent=$!
    bg_pids+=("$parent")
    wait_for sh -c "'$M' status jobs/parent | grep -q 'state: *held'" || fail "the command started"
    kill -KILL "$parent"
    wait_for sh -c "'$M' status jobs/parent | grep -q 'state: *free'" ||
        fail "the lease is released when run's parent is killed"
}

test_run_forwards_signals() {
    "$M" run sig --ttl 3s -- sh -c 'trap "echo got TERM > $0; exit 0" TERM; while :; do sleep 0.05; done' \
        "$tmp/term" >"$tmp/out" 2>"$tmp/err" &
    local runner=$!
    bg_pids+=("$runner")
    wait_for sh -c "'$M' status sig | grep -q 'state: *held'" || fail "the command started"
    sleep 0.2
    kill -TERM "$runner"
    wait "$runner"
    rc=$?
    expect_rc 0 "SIGTERM forwarded: the command's status"
    grep -q "got TERM" "$tmp/term" 2>/dev/null || fail "the command got SIGTERM"
    m status sig
    expect_out "^state: *free$" "released after a forwarded SIGTERM"

    "$M" run sig --ttl 3s -- sh -c 'trap "exit 5" INT; while :; do sleep 0.05; done' \
        >"$tmp/out" 2>"$tmp/err" &
    runner=$!
    bg_pids+=("$runner")
    wait_for sh -c "'$M' status sig | grep -q 'state: *held'" || fail "the command started"
    sleep 0.2
    kill -INT "$runner"
    wait "$runner"
    rc=$?
    expect_rc 5 "SIGINT forwarded"

    # mutexctl killed outright: nothing renews the lease any more, the command gets SIGTERM.
    "$M" run sig --ttl 3s -- sh -c 'trap "echo got TERM > $0; exit 0" TERM; while :; do sleep 0.05; done' \
        "$tmp/orphan" >"$tmp/out" 2>"$tmp/err" &
    runner=$!
    bg_pids+=("$runner")
    wait_for sh -c "'$M' status sig | grep -q 'state: *held'" || fail "the command started"
    sleep 0.2
    kill -KILL "$runner"
    wait_for grep -q "got TERM" "$tmp/orphan" || fail "the command got SIGTERM when mutexctl died"
}

test_run_stops_what_the_command_leaves_behind() {
    local t0 t1
    t0=$(now_ms)
    # It leaves a process that ignores SIGTERM, once that one has set its trap.
    m run left --grace 500ms -- sh -c 'sh -c '\''trap "" TERM; echo $$ > "$1"; exec sleep 300'\'' sh "$0" &
        while [ ! -s "$0" ]; do sleep 0.01; done' "$tmp/left"
    t1=$(now_ms)
    expect_rc 0 "run of a command that leaves a process behind"
    gone "$(cat "$tmp/left")" || fail "what the command left in its group is stopped"
    [ $((t1 - t0)) -ge 500 ] || fail "SIGKILL only after the grace"
    expect_err "left processes in its group" "run says so"
    m status left
    expect_out "^state: *free$" "released after the group is gone"
}

test_tls() {
    command -v openssl >/dev/null || {
        echo "SKIP: no openssl to make a certificate"
        exit 77
    }
    openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=127.0.0.1 \
        -addext subjectAltName=IP:127.0.0.1 -keyout "$tmp/key.pem" -out "$tmp/cert.pem" \
        >/dev/null 2>&1 || fail "openssl made no certificate"
    # A second server, on HTTPS, for this section.
    cat >"$tmp/tls-checks.sh" <<EOF
set -u
case "\$MUTEXD_URL" in https://*) ;; *) echo "not https: \$MUTEXD_URL"; exit 1 ;; esac
"$M" acquire tls/r --ca-file "$tmp/cert.pem" > "$tmp/tls.out" 2>&1 || exit 2
"$M" status tls/r > "$tmp/tls.out" 2>&1 && exit 3
grep -qi certificate "$tmp/tls.out" || exit 4
MUTEXD_CA_FILE="$tmp/cert.pem" "$M" status tls/r | grep -q "state: *held" || exit 5
exit 0
EOF
    MUTEXD_SERVER_ARGS="--tls-cert $tmp/cert.pem --tls-key $tmp/key.pem" \
        "$here/with-server.sh" bash "$tmp/tls-checks.sh" >"$tmp/out" 2>"$tmp/err"
    rc=$?
    cp "$tmp/tls.out" "$tmp/err" 2>/dev/null
    expect_rc 0 "https with --ca-file and MUTEXD_CA_FILE; refused without (step $rc failed)"
}

# Tokens made by `mutexctl token hash`, a second server that reads them, and --token and
# MUTEXD_TOKEN against it: 401 without a token, 403 without the scope or outside the prefix.
test_auth_and_token_hash() {
    local admin=admin-$RANDOM$RANDOM reader=reader-$RANDOM$RANDOM
    m token hash --name operator --scopes read,write,admin "$admin"
    expect_rc 0 "token hash"
    expect_out '^operator sha256:[0-9a-f]\{64\} read,write,admin$' "token hash prints a line"
    local want
    want=$(printf %s "$admin" | sha256sum | cut -d' ' -f1)
    expect_out "sha256:$want " "token hash is the token's SHA-256"
    cp "$tmp/out" "$tmp/tokens"
    echo "$reader" | "$M" token hash --name dashboard --prefix jobs/ - >"$tmp/out" 2>"$tmp/err"
    rc=$?
    expect_rc 0 "token hash of a token on stdin"
    expect_out '^dashboard sha256:[0-9a-f]\{64\} read jobs/$' "token hash with the defaults"
    cat "$tmp/out" >>"$tmp/tokens"
    m token hash --scopes read,root x
    expect_rc 2 "token hash with an unknown scope"
    m token hash --scopes metrics x
    expect_rc 0 "token hash with the metrics scope"
    expect_out ' metrics$' "token hash with the metrics scope prints it"
    m token hash --name "two words" x
    expect_rc 2 "token hash with a name the file cannot hold"
    MUTEXD_URL=not-a-url "$M" token hash x >"$tmp/out" 2>"$tmp/err"
    rc=$?
    expect_rc 0 "token hash needs no server"

    cat >"$tmp/auth-checks.sh" <<EOF
set -u
unset MUTEXD_TOKEN
"$M" status jobs/r > "$tmp/auth.out" 2>&1; [ \$? -eq 3 ] || exit 2
grep -q "unauthorized, HTTP 401" "$tmp/auth.out" || exit 3
"$M" --token "$reader" status jobs/r >/dev/null || exit 4
"$M" whoami > "$tmp/auth.out" 2>&1; [ \$? -eq 3 ] || exit 11
"$M" --token "$reader" whoami | grep -q "^name=dashboard scopes=read$" || exit 12
"$M" --token "$admin" whoami --json | grep -q '^{"name":"operator","scopes":\["read","write","admin"\]}$' || exit 13
"$M" --token "$reader" events --prefix jobs/ >/dev/null || exit 14
"$M" --token "$reader" events --prefix other/ > "$tmp/auth.out" 2>&1; [ \$? -eq 3 ] || exit 15
MUTEXD_TOKEN="$reader" "$M" acquire jobs/r > "$tmp/auth.out" 2>&1; [ \$? -eq 3 ] || exit 5
grep -q "forbidden, HTTP 403" "$tmp/auth.out" || exit 6
"$M" --token "$reader" status other/r > "$tmp/auth.out" 2>&1; [ \$? -eq 3 ] || exit 7
MUTEXD_TOKEN="$admin" "$M" run jobs/r -- true || exit 8
MUTEXD_TOKEN="$admin" "$M" acquire jobs/r >/dev/null || exit 9
"$M" --token "$admin" break jobs/r | grep -q "^broken jobs/r$" || exit 10
exit 0
EOF
    MUTEXD_SERVER_ARGS="--auth-tokens $tmp/tokens" \
        "$here/with-server.sh" bash "$tmp/auth-checks.sh" >"$tmp/out" 2>"$tmp/err"
    rc=$?
    cp "$tmp/auth.out" "$tmp/err" 2>/dev/null
    expect_rc 0 "401 without a token, the token's scopes and prefix (step $rc failed)"
}

# ---- Several resources at once ---------------------------------------------------------------

# acquire with several names: all or none, one lease id, a token each; renew and release of
# the set, and what they say when one lease of it was broken.
test_acquire_several() {
    m acquire acct/bob --owner other --ttl 5s
    local held_token
    held_token=$(field fencing_token)
    m acquire acct/alice acct/bob acct/carol --ttl 5s --owner mover
    expect_rc 1 "acquire of a set with one name held"
    expect_err "acct/bob is held by other (fencing token $held_token, expires in [0-9]* ms)" \
        "acquire of a set names the one held and its holder"
    [ ! -s "$tmp/out" ] || fail "acquire of a set with one name held prints nothing on stdout"
    local r
    for r in acct/alice acct/carol; do
        m status "$r"
        expect_out "^state: *free$" "all or none: $r stays free"
    done
    m acquire acct/alice acct/bob acct/carol --json
    expect_rc 1 "acquire --json of a set with one name held"
    expect_out '^{"error":{"code":"lease_held".*"resource":"acct/bob"' \
        "acquire --json of a set prints the API's error, which names the one held"

    m acquire acct/alice acct/carol acct/dave --ttl 5s --owner mover
    expect_rc 0 "acquire of a set"
    [ "$(sed -n 's/^resource: *//p' "$tmp/out" | tr '\n' ' ')" = "acct/alice acct/carol acct/dave " ] ||
        fail "acquire of a set prints a lease per resource, in the order given"
    [ "$(grep -c '^$' "$tmp/out")" -eq 2 ] || fail "a blank line between the leases of a set"
    [ "$(sed -n 's/^lease_id: *//p' "$tmp/out" | sort -u | grep -c "^$UUID$")" -eq 1 ] ||
        fail "the leases of a set share one lease id"
    [ "$(sed -n 's/^owner: *//p' "$tmp/out" | sort -u)" = mover ] || fail "each lease has the owner"
    local id tokens
    id=$(sed -n 's/^lease_id: *//p' "$tmp/out" | head -n 1)
    tokens=$(sed -n 's/^fencing_token: *//p' "$tmp/out" | tr '\n' ' ')
    if [ "$(echo "$tokens" | tr ' ' '\n' | grep -c '^[1-9][0-9]*$')" -ne 3 ] ||
        [ "$(echo "$tokens" | tr ' ' '\n' | grep . | sort -u | wc -l)" -ne 3 ]; then
        fail "each lease of a set has a token of its own: $tokens"
    fi
    local i=1
    for r in acct/alice acct/carol acct/dave; do
        m status "$r"
        expect_out "^fencing_token: *$(echo "$tokens" | cut -d' ' -f$i)$" "$r is held with its token"
        i=$((i + 1))
    done

    m renew acct/alice acct/carol acct/dave "$id" --ttl 8s
    expect_rc 0 "renew of a set"
    [ "$(sed -n 's/^fencing_token: *//p' "$tmp/out" | tr '\n' ' ')" = "$tokens" ] ||
        fail "renew of a set keeps the tokens"
    [ "$(grep -c '^ttl_ms: *8000$' "$tmp/out")" -eq 3 ] || fail "renew of a set sets each TTL"
    m break acct/carol
    m renew acct/alice acct/carol acct/dave "$id"
    expect_rc 1 "renew of a set with a lease broken"
    expect_err "acct/carol: the lease is lost" "renew of a set names the lease lost"
    m release acct/alice acct/carol acct/dave "$id"
    expect_rc 1 "release of a set with a lease broken"
    expect_out "^released acct/alice$" "release of a set releases the others"
    expect_out "^released acct/dave$" "release of a set releases the others"
    expect_no_out "acct/carol" "the lease lost is not said released"
    expect_err "acct/carol: the lease is lost" "release of a set names the lease lost"
    for r in acct/alice acct/dave; do
        m status "$r"
        expect_out "^state: *free$" "$r released"
    done

    m acquire set/a set/b --json
    expect_rc 0 "acquire --json of a set"
    expect_out '^{"leases":\[{"resource":"set/a","lease_id":"'"$UUID"'",.*},{"resource":"set/b",' \
        "acquire --json of a set prints the API's answer"
    id=$(grep -o '"lease_id":"[^"]*"' "$tmp/out" | head -n 1 | cut -d'"' -f4)
    m release set/a set/b "$id" --json
    expect_rc 0 "release --json of a set"
    expect_out '^{"leases":\[{"resource":"set/a","released":true},{"resource":"set/b","released":true}\]}$' \
        "release --json of a set"
    m acquire same same
    expect_rc 2 "a set naming a resource twice"
    expect_err "invalid_field, field resources, HTTP 400" "a set naming a resource twice"
}

# run with several resources: the environment, a set held at once, and released at the end.
test_run_several_environment_and_held() {
    m run --resource r/a --resource r/b --ttl 10s -- sh -c 'env | grep "^MUTEXD_" | sort > "$0"' \
        "$tmp/env"
    expect_rc 0 "run with two --resource"
    grep -q "^MUTEXD_RESOURCES=r/a r/b$" "$tmp/env" || fail "run sets MUTEXD_RESOURCES"
    grep -q "^MUTEXD_RESOURCE=r/a$" "$tmp/env" || fail "MUTEXD_RESOURCE is the first"
    grep -q "^MUTEXD_LEASE_ID=$UUID$" "$tmp/env" || fail "run sets the set's MUTEXD_LEASE_ID"
    grep -q "^MUTEXD_FENCING_TOKENS=[1-9][0-9]* [1-9][0-9]*$" "$tmp/env" ||
        fail "run sets MUTEXD_FENCING_TOKENS"
    local first
    first=$(sed -n 's/^MUTEXD_FENCING_TOKENS=\([0-9]*\) .*/\1/p' "$tmp/env")
    grep -q "^MUTEXD_FENCING_TOKEN=$first$" "$tmp/env" || fail "MUTEXD_FENCING_TOKEN is the first's"
    local r
    for r in r/a r/b; do
        m status "$r"
        expect_out "^state: *free$" "run releases $r when the command exits"
    done
    # RESOURCE and --resource together; while it runs, both held with the tokens given.
    "$M" run r/a --resource r/b --ttl 10s -- sh -c 'echo "$MUTEXD_FENCING_TOKENS" > "$0"; sleep 2' \
        "$tmp/tokens" 2>"$tmp/err" &
    local runner=$!
    bg_pids+=("$runner")
    wait_for test -s "$tmp/tokens" || fail "the command started"
    m status r/a
    expect_out "^fencing_token: *$(cut -d' ' -f1 "$tmp/tokens")$" "r/a held with the first token"
    m status r/b
    expect_out "^fencing_token: *$(cut -d' ' -f2 "$tmp/tokens")$" "r/b held with the second token"
    wait "$runner"
    rc=$?
    expect_rc 0 "run r/a --resource r/b"

    m acquire r/b --owner holder --ttl 5s
    m run --resource r/a --resource r/b -- touch "$tmp/ran"
    expect_rc 1 "run of a set with one held"
    expect_err "r/b is held by holder" "run of a set names the one held"
    [ ! -e "$tmp/ran" ] || fail "run of a set with one held must not start the command"
    m status r/a
    expect_out "^state: *free$" "nothing of the set is kept"
    m run --resource r/a
    expect_rc 2 "run --resource without a command"
    expect_err "no command to run (with --resource, give it after --)" "run --resource without --"
}

# The set's lease on one resource broken: the command's whole group is stopped, as for one
# lease, and the other lease of the set is released.
test_run_several_stops_the_group_when_one_lease_is_broken() {
    local runner child grandchild
    run_stubborn --resource lost/a --resource lost/b --ttl 1500ms --grace 1000ms
    sleep 0.3
    "$M" status lost/a | grep -q "^state: *held$" || fail "lost/a is held while the command runs"
    break_stubborn lost/b 1500 1000
    expect_rc 1 "run whose set lost a lease"
    expect_err "the lease on lost/b is lost (lease_lost)" "run names the lease of the set lost"
    m status lost/a
    expect_out "^state: *free$" "the lease of the set still held is released"
}

# ---- main -------------------------------------------------------------------------------------

if [ $# -ne 1 ] || ! declare -F "test_$1" >/dev/null; then
    echo "usage: $0 SECTION; sections: $(declare -F | sed -n 's/^declare -f test_//p' | tr '\n' ' ')" >&2
    exit 2
fi
"test_$1"
for f in "$tmp"/*; do
    no_sanitizer_report "$f" "$(basename "$f")"
done
if [ "$failures" -gt 0 ]; then
    echo "$1: $failures check(s) failed"
    exit 1
fi
echo "$1: passed"
