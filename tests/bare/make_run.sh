#!/usr/bin/env bash
# The quick start on a bare machine: a copy of this repository in a pristine Debian 12
# (scripts/rootfs.sh), where a new user installs what the README says to install first
# and runs `make run` exactly as the README says. Passes when the server it starts
# answers /healthz and grants one lease; prints how long `make run` took to get there.
#
#   tests/bare/make_run.sh
#
# Needs root (chroot and mounts). The copy runs in a chroot inside its own mount and PID
# namespaces: its mounts (/proc, /dev, /sys) are seen by nothing else, and killing the
# namespace's first process kills everything started in it. The chroot shares this
# machine's network: apt downloads from the Debian archive, and the server is reached on
# 127.0.0.1 from outside. The tree is removed at the end, passed or failed.
# Environment: MUTEXD_BARE_TIMEOUT, seconds `make run` may take to be healthy (1800).
set -euo pipefail
cd "$(dirname "$0")/../.."
# shellcheck source=../lib/isolation.sh
. tests/lib/isolation.sh

if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null || { echo "bare: needs root (chroot, mounts)" >&2; exit 1; }
    exec sudo --preserve-env=MUTEXD_CACHE,MUTEXD_BARE_TIMEOUT "$PWD/tests/bare/make_run.sh" "$@"
fi
TIMEOUT=${MUTEXD_BARE_TIMEOUT:-1800}

# What a new user types, in the README's words; the run fails if the README says otherwise.
INSTALL_FIRST='apt-get update && apt-get install -y make'
PORT=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
RUN="make run ARGS=\"--listen 127.0.0.1:$PORT\""
for line in "$INSTALL_FIRST" 'make run ARGS="--listen 127.0.0.1:'; do
    grep -qF -- "$line" README.md || {
        echo "bare: README.md no longer says: $line" >&2
        exit 1
    }
done

tarball=$(scripts/rootfs.sh)
work=$(mktemp -d "${TMPDIR:-/tmp}/mutexd-bare.XXXXXX")
root=$work/root

cleanup() {
    local rc=$?
    set +e # every step runs, whatever the one before it did
    chroot_stop "$work"
    rm -rf --one-file-system "$work"
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

mkdir "$root"
tar -C "$root" --numeric-owner -xpf "$tarball"
# The repository as a clone has it: the files git knows, without build folders or data.
# A copy without git: all but what .gitignore names first.
sources() {
    if command -v git >/dev/null && git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
        git ls-files -z -co --exclude-standard | while IFS= read -r -d '' f; do
            [ -e "$f" ] && printf '%s\0' "$f"
        done
    else
        find . -mindepth 1 \( -path './build*' -o -path ./data -o -name node_modules \
            -o -name __pycache__ -o -name .pytest_cache -o -path ./bench/results \) -prune \
            -o \( -type f -o -type l \) -print0
    fi
}
mkdir -p "$root/root/mutexd"
sources | tar --null --no-recursion -T - -cf - | tar -C "$root/root/mutexd" -xf -
cp -L /etc/resolv.conf "$root/etc/resolv.conf"

# The new user's commands in the chroot (tests/lib/isolation.sh). `make run` is the last
# command; its start time is written where the outside can read it.
echo "bare: Debian 12 in $root; $INSTALL_FIRST; $RUN" >&2
chroot_start "$root" "$work/log" /bin/bash -c "cd /root/mutexd && { $INSTALL_FIRST; } >/tmp/install-first.log 2>&1 || { cat /tmp/install-first.log; exit 1; }
    date +%s.%N >/tmp/make-run-started
    exec $RUN"

fail() {
    echo "bare: $*" >&2
    echo "---- the last lines of the chroot's output" >&2
    tail -n 60 "$work/log" >&2
    exit 1
}

base=http://127.0.0.1:$PORT
deadline=$((SECONDS + TIMEOUT))
until curl -fsS -o /dev/null --max-time 2 "$base/healthz" 2>/dev/null; do
    kill -0 "$chroot_pid" 2>/dev/null || fail "make run exited before the server was healthy"
    [ $SECONDS -lt $deadline ] || fail "the server was not healthy within $TIMEOUT s"
    sleep 1
done
healthy=$(date +%s.%N)
[ -s "$root/tmp/make-run-started" ] || fail "healthy, but make run never started"
started=$(cat "$root/tmp/make-run-started")

body=$(curl -sS --max-time 10 -w '\n%{http_code}' --json '{"owner":"x"}' \
    "$base/v1/resources/bare/acquire") || fail "the acquire did not get an answer"
code=${body##*$'\n'}
body=${body%$'\n'*}
[ "$code" = 200 ] || fail "acquire answered $code: $body"
case $body in
*'"fencing_token":'[0-9]*) ;;
*) fail "acquire answered 200 without a fencing_token: $body" ;;
esac

# The binary `make run` starts is the shipped one: no fault seam.
out=$(timeout 10 chroot "$root" /usr/bin/env -i MUTEXD_FAULT_COMMIT=1 \
    /root/mutexd/build-run/mutexd --listen 127.0.0.1:0 --data-dir /tmp/fault-check 2>&1) && fail "the make run binary accepted MUTEXD_FAULT_COMMIT"
case $out in
*"this build has no fault injection"*) ;;
*) fail "the make run binary did not refuse MUTEXD_FAULT_COMMIT as expected: $out" ;;
esac

awk -v a="$started" -v b="$healthy" \
    'BEGIN { s = b - a; printf "bare: make run took %d s (%.1f min) from start to healthy; acquire 200 with a fencing token\n", s, s / 60 }'
