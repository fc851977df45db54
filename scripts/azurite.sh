#!/usr/bin/env bash
# Azurite, the Azure Storage emulator, for the tests: the npm package pinned by
# tests/azurite/package.json and package-lock.json, blob service only, in memory, on loopback.
#
#   scripts/azurite.sh install     npm ci in tests/azurite when node_modules is missing or was
#                                  installed from another lock file
#   scripts/azurite.sh start DIR [PORT]
#                                  starts it in the background on PORT (default: a free port)
#                                  and waits until it answers; writes DIR/port, DIR/pid,
#                                  DIR/connection-string and DIR/azurite.log. On port 10000 it
#                                  is what UseDevelopmentStorage=true names (`make azurite`)
#   scripts/azurite.sh stop DIR    stops the one started in DIR (by its PID) and waits for it
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
pkg=$root/tests/azurite
bin=$pkg/node_modules/.bin/azurite-blob
stamp=$pkg/node_modules/.installed-lock-sha256
dev_key='Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=='

die() {
    echo "azurite.sh: $*" >&2
    exit 1
}

# Alive and not a zombie (an orphan may wait a while to be reaped).
alive() {
    local stat
    stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
    [ "$(echo "${stat##*) }" | cut -d' ' -f1)" != Z ]
}

# Is PID the Azurite we started on PORT? Guards against a PID that was reused.
ours() {
    alive "$1" && tr '\0' ' ' <"/proc/$1/cmdline" 2>/dev/null | grep -q -- "azurite-blob .*--blobPort $2 "
}

install() {
    command -v node >/dev/null || die "node is not installed (scripts/deps.sh check installs it)"
    command -v npm >/dev/null || die "npm is not installed (scripts/deps.sh check installs it)"
    local want
    want=$(sha256sum "$pkg/package-lock.json" | cut -d' ' -f1)
    # Tests run in parallel and each may get here first: one installs, the others wait.
    exec 9<"$pkg/package-lock.json"
    flock 9
    if [ -x "$bin" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then
        return 0
    fi
    echo "azurite.sh: npm ci in tests/azurite" >&2
    (cd "$pkg" && npm ci --no-audit --no-fund --loglevel=error) >&2 ||
        die "npm ci failed in tests/azurite"
    echo "$want" >"$stamp"
}

# A TCP port nothing listens on now. Another process may take it before Azurite binds it;
# start() then sees Azurite exit and tries another.
free_port() {
    node -e 'const s = require("net").createServer();
             s.listen(0, "127.0.0.1", () => { console.log(s.address().port); s.close(); });'
}

answers() {
    if command -v curl >/dev/null; then
        curl -s -o /dev/null --max-time 1 "http://127.0.0.1:$1/"
    else
        (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
    fi
}

start() {
    local dir=$1 want=${2:-} port pid i attempts=5
    [ -x "$bin" ] || die "Azurite is not installed: run scripts/azurite.sh install"
    mkdir -p "$dir"
    if [ -f "$dir/pid" ]; then
        ours "$(cat "$dir/pid")" "$(cat "$dir/port" 2>/dev/null)" &&
            die "$dir already has an Azurite (pid $(cat "$dir/pid"), port $(cat "$dir/port"))"
        rm -f "$dir/pid" "$dir/port" # one that is gone (a reboot, a kill)
    fi
    if [ -n "$want" ]; then
        [[ "$want" =~ ^[0-9]+$ ]] && [ "$want" -ge 1 ] && [ "$want" -le 65535 ] ||
            die "not a port: $want"
        ! answers "$want" || die "something already answers on 127.0.0.1:$want"
        attempts=1
    fi
    for ((attempt = 1; attempt <= attempts; attempt++)); do
        port=${want:-$(free_port)}
        # Started directly, not from a subshell (no `cd X && ... &`), so that $! is node's PID:
        # the bin script's `#!/usr/bin/env node` execs node in place. Its output goes to a file:
        # a test runner waits for every holder of its pipes to exit.
        "$bin" --inMemoryPersistence --blobHost 127.0.0.1 --blobPort "$port" \
            --disableTelemetry --silent </dev/null >>"$dir/azurite.log" 2>&1 &
        pid=$!
        echo "$pid" >"$dir/pid"
        echo "$port" >"$dir/port"
        for ((i = 0; i < 600; i++)); do # 30 s
            alive "$pid" || break
            if answers "$port"; then
                printf 'DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;AccountKey=%s;BlobEndpoint=http://127.0.0.1:%s/devstoreaccount1;\n' \
                    "$dev_key" "$port" >"$dir/connection-string"
                return 0
            fi
            sleep 0.05
        done
        if alive "$pid"; then
            kill -KILL "$pid" 2>/dev/null || true
            rm -f "$dir/pid" "$dir/port"
            die "Azurite did not answer on port $port within 30 s; see $dir/azurite.log"
        fi
        rm -f "$dir/pid" "$dir/port"
        echo "azurite.sh: Azurite exited at start (attempt $attempt, port $port)" >&2
    done
    die "Azurite would not start${want:+ on port $want}; see $dir/azurite.log"
}

stop() {
    local dir=$1 pid port i
    [ -f "$dir/pid" ] || return 0
    pid=$(cat "$dir/pid")
    port=$(cat "$dir/port" 2>/dev/null || echo '?')
    if ours "$pid" "$port"; then
        kill -TERM "$pid" 2>/dev/null || true
        for ((i = 0; i < 100; i++)); do # 5 s, then no more asking
            alive "$pid" || break
            sleep 0.05
        done
        if alive "$pid"; then
            kill -KILL "$pid" 2>/dev/null || true
        fi
    fi
    rm -f "$dir/pid" "$dir/port" "$dir/connection-string"
}

case "${1:-}" in
install) install ;;
start)
    [ $# -eq 2 ] || [ $# -eq 3 ] || die "usage: $0 start DIR [PORT]"
    start "$2" "${3:-}"
    ;;
stop)
    [ $# -eq 2 ] || die "usage: $0 stop DIR"
    stop "$2"
    ;;
*) die "usage: $0 install | start DIR [PORT] | stop DIR" ;;
esac
