#!/usr/bin/env bash
# Runs the topology of docker-compose.yml natively, with no container engine: Azurite
# from npm, the three servers of the partitioned group with exactly the environment the
# compose file gives them, and five leader-election workers, in Python, Node.js, Go, Java
# and .NET (where the .NET SDK is), with theirs (host names become loopback addresses, ports free ones). Runs Azurite's
# health check as the compose file writes it. Checks that the servers agree on the
# partition map and each owns its share (5 or 6 of 16), that exactly one worker leads, that
# its resource is served by its partition's owner whichever server is asked, that killing
# that owner (SIGKILL, as `docker kill`) moves its partitions only, to the other two, while
# the leader keeps its lease and renews it through the new owner, that stopping the leader
# (as `docker stop` does, SIGTERM) hands leadership over, and that killing the next one
# (SIGKILL) does too within the lease's TTL. The leader is read from a server: the holder's
# owner is "<hostname>:<pid>", and the pid is a worker's. Stops everything it started.
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
SERVERS=(mutexd-a mutexd-b mutexd-c)
services=$(docker-compose -f docker-compose.yml config --services)
for s in "${SERVERS[@]}" worker-python worker-node worker-go worker-java worker-dotnet; do
    grep -qx "$s" <<<"$services" || fail "the compose file has no service $s"
done
declare -A port=()
for s in "${SERVERS[@]}"; do
    p=$(free_port)
    while [[ " ${port[*]} " == *" $p "* ]]; do p=$(free_port); done
    port[$s]=$p
done

# Azurite's health check, as written (the host's node, Azurite's port).
mapfile -t azcheck < <(service_check azurite)
"${azcheck[@]//127.0.0.1:10000/127.0.0.1:$AZ_PORT}" || fail "Azurite's health check fails against Azurite"

# A compose host name:port as this machine reaches it.
native_urls() {
    local v=$1
    v=${v//azurite:10000/127.0.0.1:$AZ_PORT}
    v=${v//mutexd-a:8080/127.0.0.1:${port[mutexd-a]}}
    v=${v//mutexd-b:8080/127.0.0.1:${port[mutexd-b]}}
    v=${v//mutexd-c:8080/127.0.0.1:${port[mutexd-c]}}
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
for s in "${SERVERS[@]}"; do start_server "$s"; done

# The group as its servers see it (GET /v1/servers), each server named by its service.
cat >"$WORK/group.py" <<'PY'
import json, sys, urllib.request

def get(port, path):
    with urllib.request.urlopen("http://127.0.0.1:%s%s" % (port, path), timeout=2) as r:
        return json.load(r), r.headers

def main(cmd, *args):
    ports = dict(a.split("=", 1) for a in args if "=" in a)
    svc = {"http://127.0.0.1:%s" % p: s for s, p in ports.items()}
    if cmd == "shares":
        # Once every server named agrees on the map, every partition has one of them as its
        # owner, each owns floor or ceil of N / servers and lists exactly those: the map,
        # a line "<partition> <service> <generation>" each.
        maps = []
        for s, p in ports.items():
            v = get(p, "/v1/servers")[0]
            parts = v.get("partitions") or {}
            n = parts.get("count") or 0
            m = {o["partition"]: (svc.get(o["url"]), o["generation"]) for o in parts.get("owners", [])}
            if n < 2 or sorted(m) != list(range(n)) or any(o is None for o, _ in m.values()):
                sys.exit(1)
            listed = {svc.get(e["url"]): sorted(e.get("partitions") or []) for e in v["servers"]}
            for t in ports:
                share = sorted(q for q, (o, _) in m.items() if o == t)
                if listed.get(t) != share or len(share) not in (n // len(ports), -(-n // len(ports))):
                    sys.exit(1)
            maps.append(m)
        if any(m != maps[0] for m in maps):
            sys.exit(1)
        for q, (o, g) in sorted(maps[0].items()):
            print(q, o, g)
    elif cmd == "served":
        # Each server asked about the resource: "<server asked> <Mutexd-Partition> <Mutexd-Served-By>".
        for s, p in ports.items():
            h = get(p, "/v1/resources/" + args[0])[1]
            print(s, h.get("Mutexd-Partition"), svc.get(h.get("Mutexd-Served-By"), "none"))
    elif cmd == "renewed":
        # "yes" when the lease was last renewed by its partition's owner of now (on or after
        # its "since" as the owner says it, another server may not know it; the servers'
        # clock is this machine's).
        resource, p = args[0], list(ports.values())[0]
        st, h = get(p, "/v1/resources/" + resource)
        owner = ports[svc[h["Mutexd-Served-By"]]]
        owners = get(owner, "/v1/servers")[0]["partitions"]["owners"]
        since = owners[int(h["Mutexd-Partition"])]["since"]
        print("yes" if st["holder"]["renewed_at"] >= since else "no")  # RFC 3339 UTC, ms

try:
    main(*sys.argv[1:])
except (OSError, ValueError, KeyError, TypeError, IndexError):
    sys.exit(1)
PY
# group COMMAND [RESOURCE] SERVICE...: each service is passed as SERVICE=PORT.
group() {
    local a args=()
    for a in "$@"; do
        if [ -n "${port[$a]:-}" ]; then args+=("$a=${port[$a]}"); else args+=("$a"); fi
    done
    /usr/bin/python3 "$WORK/group.py" "${args[@]}"
}

map=""
for _ in $(seq 1 150); do
    map=$(group shares "${SERVERS[@]}") && break
    map=""
    sleep 0.2
done
[ -n "$map" ] || { for s in "${SERVERS[@]}"; do curl -s --max-time 2 "http://127.0.0.1:${port[$s]}/v1/servers" >&2; echo >&2; done
    fail "the servers do not agree on a map of the partitions with a share for each"; }
N=$(echo "$map" | wc -l)
shares=$(for s in "${SERVERS[@]}"; do echo "$s owns $(echo "$map" | awk -v s="$s" '$2 == s' | wc -l)"; done | paste -sd, | sed 's/,/, /g')
for s in "${SERVERS[@]}"; do
    grep -q 'msg="mirror: shipping"' "$WORK/$s.log" || fail "$s does not mirror to Azurite"
done
echo "native: $N partitions: $shares"

# The workers, one in each client language, as the compose file configures them. The Go
# one is built as its Dockerfile builds it (Debian's Go, nothing downloaded), and so is
# the Java one (javac and jar).
( cd clients/examples/go/leader && CGO_ENABLED=0 GOPROXY=off GOCACHE="${XDG_CACHE_HOME:-$HOME/.cache}/mutexd-go/build" \
    go build -trimpath -o "$WORK/mutexd-leader" . ) || fail "the Go worker does not build"
TMPDIR=$WORK clients/examples/java/leader/build.sh "$WORK/mutexd-leader.jar" || fail "the Java worker does not build"
langs=(python node go java)
# The .NET one where the .NET SDK is (a plain Debian 12 has none), published as its
# Dockerfile publishes it.
if command -v dotnet >/dev/null; then
    TMPDIR=$WORK DOTNET_CLI_TELEMETRY_OPTOUT=1 DOTNET_NOLOGO=1 DOTNET_CLI_USE_MSBUILD_SERVER=0 \
        dotnet publish clients/examples/dotnet/leader -c Release -o "$WORK/dotnet-leader" \
        -p:UseAppHost=false -p:UseSharedCompilation=false -nodeReuse:false \
        --artifacts-path "$WORK/dotnet-artifacts" -v:quiet >"$WORK/dotnet-build.log" 2>&1 ||
        { tail -n 20 "$WORK/dotnet-build.log" >&2; fail "the .NET worker does not build"; }
    TMPDIR=$WORK dotnet build-server shutdown >/dev/null 2>&1 || true
    langs+=(dotnet)
else
    echo "native: the .NET worker is left out: this machine has no .NET SDK"
fi
declare -A wpid=() wlang=()
i=0
for lang in "${langs[@]}"; do
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
        dotnet) cmd=(env TMPDIR="$WORK" dotnet "$WORK/dotnet-leader/Leader.dll") ;;
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
        for i in "${!wpid[@]}"; do
            if [ "${wpid[$i]}" = "$pid" ]; then echo "$i $token"; fi
        done
    }
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
    leader=$(leader_now mutexd-a)
    [ -n "$leader" ] && break
    sleep 0.2
done
[ -n "$leader" ] || fail "no worker leads"
# The same one keeps it, asked of any server, and the other three are still running (and
# trying).
for i in $(seq 1 21); do
    s=${SERVERS[$((i % 3))]}
    [ "$(leader_now "$s")" = "$leader" ] || fail "the leader changed with nothing stopped (asked of $s)"
    sleep 0.2
done
for i in "${!wpid[@]}"; do
    kill -0 "${wpid[$i]}" || fail "worker $i exited"
done
held=$(holder_now mutexd-a) || true
echo "native: worker $leader (${wlang[$leader]}) leads (fencing token ${held#* }); the others wait"

# The leader's resource is in the partition its name hashes to, and is served by that
# partition's owner, whichever server is asked.
P=$(/usr/bin/python3 -c 'import sys, zlib; print(zlib.crc32(sys.argv[1].encode()) % int(sys.argv[2]))' "$RESOURCE" "$N")
owner=$(echo "$map" | awk -v p="$P" '$1 == p { print $2 }')
served=$(group served "$RESOURCE" "${SERVERS[@]}") || fail "a server does not answer about $RESOURCE"
[ "$(echo "$served" | awk '{ print $2, $3 }' | sort -u)" = "$P $owner" ] ||
    fail "$RESOURCE (partition $P, owned by $owner) is answered as: $served"
echo "native: $RESOURCE is in partition $P, served by its owner $owner whichever server is asked"

# docker kill of that owner: SIGKILL. Its partitions are served by the other two within
# 10 s, every other partition keeps its owner and generation; the leader keeps its lease
# (or, had it run out, takes it again with a higher token) and no other worker holds it at
# any answer; it renews through the partition's new owner.
survivors=()
for s in "${SERVERS[@]}"; do [ "$s" = "$owner" ] || survivors+=("$s"); done
asked=${survivors[0]}
kill -KILL "${spid[$owner]}"
t0=$(date +%s.%N)
took=""
after=""
free=0
token=${held#* }
while :; do
    h=$(holder_now "$asked") || true # unanswered while the partition has no owner
    case $h in
        "") ;;
        free) free=$((free + 1)) ;;
        *)
            [ "${h% *}" = "$leader" ] || fail "after killing $owner, the holder is worker ${h% *}, not $leader"
            [ "${h#* }" -ge "$token" ] || fail "after killing $owner, the fencing token went from $token to ${h#* }"
            token=${h#* }
            ;;
    esac
    now=$(date +%s.%N)
    if [ -z "$took" ]; then
        if after=$(group shares "${survivors[@]}"); then
            took=$(/usr/bin/python3 -c 'import sys; print("%.1f" % (float(sys.argv[2]) - float(sys.argv[1])))' "$t0" "$now")
        else
            /usr/bin/python3 -c 'import sys; sys.exit(float(sys.argv[2]) - float(sys.argv[1]) > 10)' "$t0" "$now" ||
                fail "$owner's partitions are not served by ${survivors[*]} 10 s after killing it"
        fi
    elif [ "$(group renewed "$RESOURCE" "${survivors[@]}")" = yes ] && [ "$(leader_now "$asked")" = "$leader" ]; then
        break
    else
        /usr/bin/python3 -c 'import sys; sys.exit(float(sys.argv[2]) - float(sys.argv[1]) > 10 + float(sys.argv[3]))' \
            "$t0" "$now" "$((TTL_MS / 1000))" ||
            fail "worker $leader did not renew its lease through partition $P's new owner within the TTL of the takeover"
    fi
    sleep 0.2
done
moved=$(echo "$map" | awk -v s="$owner" '$2 == s' | wc -l)
kept=$(comm -23 <(echo "$map" | awk -v s="$owner" '$2 != s' | sort) <(echo "$after" | sort))
[ -z "$kept" ] || fail "partitions of the surviving servers moved or changed generation: $kept (now: $(echo "$after" | paste -sd' '))"
new_owner=$(echo "$after" | awk -v p="$P" '$1 == p { print $2 }')
shares=$(for s in "${survivors[@]}"; do echo "$s owns $(echo "$after" | awk -v s="$s" '$2 == s' | wc -l)"; done | paste -sd, | sed 's/,/, /g')
if [ "$token" = "${held#* }" ]; then how="with the same token"; else how="again, with the higher token $token"; fi
echo "native: after killing $owner, its $moved partitions are served by the others after $took s ($shares), the $((N - moved)) others kept their owners; worker $leader leads $how and renews through $new_owner ($free samples free)"

# docker stop of the leader: SIGTERM. The leader releases; another takes over at once
# (within a retry).
kill -TERM "${wpid[$leader]}"
wait "${wpid[$leader]}" || fail "the stopped leader did not exit 0"
t=$(date +%s)
deadline=$((t + RETRY_S + 3))
next=""
while [ "$(date +%s)" -le "$deadline" ]; do
    next=$(leader_now "$asked")
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
    last=$(leader_now "$asked")
    [ -n "$last" ] && [ "$last" != "$next" ] && break
    last=""
    sleep 0.2
done
[ -n "$last" ] || fail "no takeover within $limit s of killing worker $next"
echo "native: after killing worker $next (${wlang[$next]}), worker $last (${wlang[$last]}) leads (within ${limit} s)"
echo "native: 7 passed, 0 failed"
