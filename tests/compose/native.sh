#!/usr/bin/env bash
# Runs the topology of docker-compose.yml natively, with no container engine: Azurite
# from npm, the two servers of the group with exactly the environment the compose file
# gives them, and four leader-election workers, in Python, Node.js, Go and Java, with theirs
# (host names become
# loopback addresses, ports free ones). Runs Azurite's health check as the compose file
# writes it. Checks that the servers agree on one active, that exactly one worker leads,
# that killing the active server (SIGKILL, as `docker kill`) makes the other active while
# the leader keeps its lease and fencing token, that stopping the leader (as `docker stop`
# does, SIGTERM) hands leadership over, and that killing the next one (SIGKILL) does too
# within the lease's TTL. The leader is read from a server: the holder's owner is
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

fail() { echo "native: FAILED: $*" >&2; for f in "$WORK"/worker*.log "$WORK"/mutexd-*.log; do echo "--- $f" >&2; tail -n 20 "$f" >&2 || true; done; exit 1; }

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
declare -A port=([mutexd-a]=$(free_port) [mutexd-b]=$(free_port))
[ "${port[mutexd-a]}" != "${port[mutexd-b]}" ] || port[mutexd-b]=$(free_port)

# Azurite's health check, as written (the host's node, Azurite's port).
mapfile -t azcheck < <(service_check azurite)
"${azcheck[@]//127.0.0.1:10000/127.0.0.1:$AZ_PORT}" || fail "Azurite's health check fails against Azurite"

# A compose host name:port as this machine reaches it.
native_urls() {
    local v=$1
    v=${v//azurite:10000/127.0.0.1:$AZ_PORT}
    v=${v//mutexd-a:8080/127.0.0.1:${port[mutexd-a]}}
    v=${v//mutexd-b:8080/127.0.0.1:${port[mutexd-b]}}
    echo "$v"
}

# The servers, as the compose file configures them.
declare -A spid=()
start_server() { # service
    local kv senv=()
    while IFS= read -r kv; do
        kv=$(native_urls "$kv")
        case $kv in
            MUTEXD_LISTEN=*) kv="MUTEXD_LISTEN=127.0.0.1:${port[$1]}" ;;
            MUTEXD_DATA_DIR=*) kv="MUTEXD_DATA_DIR=$WORK/data-$1" ;;
        esac
        senv+=("$kv")
    done < <(service_env "$1")
    env "${senv[@]}" "$BIN" >"$WORK/$1.log" 2>&1 &
    spid[$1]=$!
    pids+=($!)
    # Its own health check, as the compose file runs it.
    for _ in $(seq 1 100); do
        env "${senv[@]}" "$BIN" --probe 2>/dev/null && return 0
        sleep 0.1
    done
    env "${senv[@]}" "$BIN" --probe || fail "$1 did not become healthy"
}
start_server mutexd-a
start_server mutexd-b

# {"self": ..., "active": ...} of GET /v1/servers on a server: "<role> <active's service>".
view() { # service
    curl -s --max-time 2 "http://127.0.0.1:${port[$1]}/v1/servers" | /usr/bin/python3 -c '
import json, sys
v = json.load(sys.stdin)
ports = dict(zip(sys.argv[1::2], sys.argv[2::2]))
a = (v.get("active") or {}).get("url", "")
names = [s for s, p in ports.items() if a.endswith(":" + p)]
print(v["self"]["role"], names[0] if names else "none")' \
        mutexd-a "${port[mutexd-a]}" mutexd-b "${port[mutexd-b]}" 2>/dev/null || true
}
active=""
for _ in $(seq 1 100); do
    va=$(view mutexd-a)
    vb=$(view mutexd-b)
    a=${va#* }
    if [ "$a" != none ] && [ -n "$a" ] && [ "$a" = "${vb#* }" ] &&
        [ "$(printf '%s\n%s\n' "${va% *}" "${vb% *}" | sort | tr '\n' ' ')" = "active standby " ]; then
        active=$a
        break
    fi
    sleep 0.2
done
[ -n "$active" ] || fail "the servers do not agree on an active: mutexd-a says '$va', mutexd-b '$vb'"
if [ "$active" = mutexd-a ]; then standby=mutexd-b; else standby=mutexd-a; fi
grep -q 'msg="mirror: shipping"' "$WORK/$active.log" || fail "the active server does not mirror to Azurite"
echo "native: $active is active, $standby its standby"

# Four workers, one in each client language, as the compose file configures them. The Go
# one is built as its Dockerfile builds it (Debian's Go, nothing downloaded), and so is
# the Java one (javac and jar).
( cd clients/examples/go/leader && CGO_ENABLED=0 GOPROXY=off GOCACHE="${XDG_CACHE_HOME:-$HOME/.cache}/mutexd-go/build" \
    go build -trimpath -o "$WORK/mutexd-leader" . ) || fail "the Go worker does not build"
TMPDIR=$WORK clients/examples/java/leader/build.sh "$WORK/mutexd-leader.jar" || fail "the Java worker does not build"
declare -A wpid=() wlang=()
i=0
for lang in python node go java; do
    i=$((i + 1))
    wenv=()
    while IFS= read -r kv; do
        wenv+=("$(native_urls "$kv")")
    done < <(service_env "worker-$lang")
    case $lang in
        python) cmd=(env PYTHONPATH="$ROOT/clients/python" /usr/bin/python3 -u clients/examples/python/leader.py) ;;
        node) cmd=(node clients/examples/node/leader.mjs) ;;
        go) cmd=("$WORK/mutexd-leader") ;;
        java) cmd=(java -XX:TieredStopAtLevel=1 -jar "$WORK/mutexd-leader.jar") ;;
    esac
    env "${wenv[@]}" "${cmd[@]}" > "$WORK/worker$i.log" 2>&1 &
    wpid[$i]=$!
    wlang[$i]=$lang
    pids+=($!)
done
TTL_MS=$(printf '%s\n' "${wenv[@]}" | sed -n 's/^MUTEXD_TTL_MS=//p')
RESOURCE=$(printf '%s\n' "${wenv[@]}" | sed -n 's/^MUTEXD_RESOURCE=//p')
RETRY_S=$(printf '%s\n' "${wenv[@]}" | sed -n 's/^MUTEXD_RETRY_S=//p')

# The holder now, asked of a server: "<worker> <fencing token>"; "free"; or nothing when
# the server does not answer.
holder_now() { # service
    curl -s --max-time 2 "http://127.0.0.1:${port[$1]}/v1/resources/$RESOURCE" |
        /usr/bin/python3 -c '
import json, sys
st = json.load(sys.stdin)
if st.get("state") == "held":
    print(st["holder"]["owner"].rsplit(":", 1)[1], st["holder"]["fencing_token"])
else:
    print("free")' 2>/dev/null | {
        read -r pid token || exit 0
        [ "$pid" = free ] && { echo free; exit 0; }
        for i in 1 2 3 4; do
            if [ "${wpid[$i]}" = "$pid" ]; then echo "$i $token"; fi
        done
    }
}
# "yes" when the lease was last renewed by the server's active of now (on or after its
# "since"; the servers' clock is this machine's).
renewed_by_active() { # service
    /usr/bin/python3 - "http://127.0.0.1:${port[$1]}" "$RESOURCE" <<'PY' 2>/dev/null || true
import json, sys, urllib.request
base, resource = sys.argv[1:]
get = lambda p: json.load(urllib.request.urlopen(base + p, timeout=2))
since = get("/v1/servers")["active"]["since"]
renewed = get("/v1/resources/" + resource)["holder"]["renewed_at"]
print("yes" if renewed >= since else "no")  # both RFC 3339 UTC, milliseconds
PY
}
# The worker that holds the lease now, or nothing.
leader_now() { # service
    local h
    h=$(holder_now "$1") || true
    case $h in free | "") ;; *) echo "${h% *}" ;; esac
}

sleep 3
leader=""
for _ in $(seq 1 50); do
    leader=$(leader_now "$active")
    [ -n "$leader" ] && break
    sleep 0.2
done
[ -n "$leader" ] || fail "no worker leads"
# The same one keeps it, and the other three are still running (and trying).
for _ in $(seq 1 20); do
    [ "$(leader_now "$standby")" = "$leader" ] || fail "the leader changed with nothing stopped"
    sleep 0.2
done
for i in 1 2 3 4; do
    kill -0 "${wpid[$i]}" || fail "worker $i exited"
done
held=$(holder_now "$active") || true
echo "native: worker $leader (${wlang[$leader]}) leads (fencing token ${held#* }); the others wait"

# docker kill of the active server: SIGKILL. The standby takes over within 10 s; the
# leader's lease and token stay, at every answer, and it renews through the new active.
kill -KILL "${spid[$active]}"
t0=$(date +%s.%N)
took=""
while :; do
    h=$(holder_now "$standby") || true # unanswered while the standby holds requests
    if [ -n "$h" ] && [ "$h" != "$held" ]; then
        fail "after killing $active, the holder is '$h', not '$held'"
    fi
    now=$(date +%s.%N)
    if [ -z "$took" ]; then
        if [ "$(view "$standby")" = "active $standby" ]; then
            took=$(/usr/bin/python3 -c 'import sys; print("%.1f" % (float(sys.argv[2]) - float(sys.argv[1])))' "$t0" "$now")
        else
            /usr/bin/python3 -c 'import sys; sys.exit(float(sys.argv[2]) - float(sys.argv[1]) > 10)' "$t0" "$now" ||
                fail "$standby is not active 10 s after killing $active"
        fi
    elif [ "$(renewed_by_active "$standby")" = yes ]; then
        break
    else
        /usr/bin/python3 -c 'import sys; sys.exit(float(sys.argv[2]) - float(sys.argv[1]) > 10 + float(sys.argv[3]))' \
            "$t0" "$now" "$((TTL_MS / 1000))" ||
            fail "worker $leader did not renew its lease through $standby within the TTL of its takeover"
    fi
    sleep 0.2
done
echo "native: after killing $active, $standby is active (after $took s); worker $leader still leads with the same token and renews through it"

# docker stop of the leader: SIGTERM. The leader releases; another takes over at once
# (within a retry).
kill -TERM "${wpid[$leader]}"
wait "${wpid[$leader]}" || fail "the stopped leader did not exit 0"
t=$(date +%s)
deadline=$((t + RETRY_S + 3))
next=""
while [ "$(date +%s)" -le "$deadline" ]; do
    next=$(leader_now "$standby")
    [ -n "$next" ] && [ "$next" != "$leader" ] && break
    next=""
    sleep 0.2
done
[ -n "$next" ] || fail "no takeover within $((RETRY_S + 3)) s of stopping the leader"
echo "native: after stopping worker $leader (${wlang[$leader]}), worker $next (${wlang[$next]}) leads"

# docker kill of the leader: SIGKILL. Its lease runs out; another takes over within the
# TTL (plus a retry).
kill -KILL "${wpid[$next]}"
t=$(date +%s)
limit=$(( (TTL_MS + 999) / 1000 + RETRY_S + 2 ))
last=""
while [ "$(date +%s)" -le "$((t + limit))" ]; do
    last=$(leader_now "$standby")
    [ -n "$last" ] && [ "$last" != "$next" ] && break
    last=""
    sleep 0.2
done
[ -n "$last" ] || fail "no takeover within $limit s of killing worker $next"
echo "native: after killing worker $next (${wlang[$next]}), worker $last (${wlang[$last]}) leads (within ${limit} s)"
echo "native: 6 passed, 0 failed"
