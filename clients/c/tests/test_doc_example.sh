#!/usr/bin/env bash
# The C examples of docs/clients/c.md, exactly as printed there, built against an installed
# copy of the library (cmake --install into a temporary prefix, then pkg-config), run
# against a real server: guarded-job.c must take the lease, work, release it, and exit 0;
# transfer.c the same with a lock on two resources. This keeps the examples, the install
# rules and mutexd.pc honest.
#
#   with-server.sh test_doc_example.sh docs/clients/c.md BUILD_DIR
#
# MUTEXD_TEST_CFLAGS: flags for compiling the example (the sanitizers of a sanitizer build).
set -uo pipefail

doc=${1:?usage: $0 DOC BUILD_DIR}
build=${2:?usage: $0 DOC BUILD_DIR}
: "${MUTEXD_URL:?run this through with-server.sh}"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/doc-example.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
# A test runner's timeout sends SIGTERM: leave through the EXIT trap.
trap 'exit 143' TERM INT HUP

# The fenced c block right after the marker of example $1, into $tmp/$1.
extract() {
    awk -v marker="<!-- example: $1 -->" '$0 == marker {found = 1; next}
         found && /^```c$/ {inside = 1; next}
         inside && /^```$/ {exit}
         inside {print}' "$doc" >"$tmp/$1"
    [ -s "$tmp/$1" ] || {
        echo "FAIL: no example $1 in $doc"
        exit 1
    }
}
extract guarded-job.c
extract transfer.c

cmake --install "$build" --prefix "$tmp/prefix" >"$tmp/install.log" 2>&1 || {
    cat "$tmp/install.log"
    echo "FAIL: cmake --install"
    exit 1
}
pc=$(find "$tmp/prefix" -name mutexd.pc)
if [ -z "$pc" ] || [ ! -f "$tmp/prefix/include/mutexd.h" ]; then
    echo "FAIL: the install has no mutexd.pc or mutexd.h"
    exit 1
fi
libdir=$(dirname "$(dirname "$pc")")
ls "$libdir"/libmutexd.so* "$libdir"/libmutexd.a >/dev/null || {
    echo "FAIL: the install lacks a library"
    exit 1
}
[ -x "$tmp/prefix/bin/mutexctl" ] || {
    echo "FAIL: the install has no mutexctl"
    exit 1
}

PKG_CONFIG_PATH=$(dirname "$pc")
export PKG_CONFIG_PATH
flags=$(pkg-config --cflags --libs mutexd) || exit 1
echo "pkg-config --cflags --libs mutexd: $flags"
for example in guarded-job transfer; do
    # shellcheck disable=SC2086 # word splitting of the flags is meant
    cc -std=c11 -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes ${MUTEXD_TEST_CFLAGS:-} \
        -o "$tmp/$example" "$tmp/$example.c" $flags || {
        echo "FAIL: the example $example.c does not build"
        exit 1
    }
done

LD_LIBRARY_PATH="$libdir" "$tmp/guarded-job" jobs/doc-example >"$tmp/out" 2>&1
rc=$?
cat "$tmp/out"
[ "$rc" -eq 0 ] || {
    echo "FAIL: the example exited $rc"
    exit 1
}
for line in "^acquired jobs/doc-example with fencing token [1-9]" \
    "^step 5 written with fencing token [1-9]" "^done$"; do
    grep -q "$line" "$tmp/out" || {
        echo "FAIL: the example's output has no line matching '$line'"
        exit 1
    }
done
"$tmp/prefix/bin/mutexctl" status jobs/doc-example | grep -q "^state: *free$" || {
    echo "FAIL: the example did not release its lease"
    exit 1
}

# transfer.c: both accounts locked, each write with its own account's token, both released.
LD_LIBRARY_PATH="$libdir" "$tmp/transfer" doc/alice doc/bob >"$tmp/out" 2>&1
rc=$?
cat "$tmp/out"
[ "$rc" -eq 0 ] || {
    echo "FAIL: transfer.c exited $rc"
    exit 1
}
line=$(grep "^locked doc/alice (fencing token [1-9][0-9]*) and doc/bob (fencing token [1-9][0-9]*)$" \
    "$tmp/out") || {
    echo "FAIL: transfer.c did not say it locked both accounts"
    exit 1
}
alice=$(echo "$line" | sed 's/^locked doc\/alice (fencing token \([0-9]*\)).*/\1/')
bob=$(echo "$line" | sed 's/.*doc\/bob (fencing token \([0-9]*\))$/\1/')
for want in "^doc/alice -10 written with fencing token $alice$" \
    "^doc/bob +10 written with fencing token $bob$" "^done$"; do
    grep -q "$want" "$tmp/out" || {
        echo "FAIL: transfer.c's output has no line matching '$want'"
        exit 1
    }
done
for r in doc/alice doc/bob; do
    "$tmp/prefix/bin/mutexctl" status "$r" | grep -q "^state: *free$" || {
        echo "FAIL: transfer.c did not release $r"
        exit 1
    }
done
# Held by another: nothing is taken, and it says so.
"$tmp/prefix/bin/mutexctl" acquire doc/bob --owner other --ttl 5s >/dev/null || exit 1
sed -i 's/\.wait_ms = 10000/.wait_ms = 0/' "$tmp/transfer.c"
# shellcheck disable=SC2086
cc -std=c11 ${MUTEXD_TEST_CFLAGS:-} -o "$tmp/transfer" "$tmp/transfer.c" $flags || exit 1
LD_LIBRARY_PATH="$libdir" "$tmp/transfer" doc/alice doc/bob >"$tmp/out" 2>&1
rc=$?
cat "$tmp/out"
if [ "$rc" -ne 1 ] || ! grep -q "^an account is busy (held by other); not transferring$" "$tmp/out"; then
    echo "FAIL: transfer.c with an account held exited $rc"
    exit 1
fi
"$tmp/prefix/bin/mutexctl" status doc/alice | grep -q "^state: *free$" || {
    echo "FAIL: transfer.c took doc/alice while doc/bob was held"
    exit 1
}
echo "passed"
