#!/usr/bin/env bash
# The C example of docs/clients/c.md, exactly as printed there, built against an installed
# copy of the library (cmake --install into a temporary prefix, then pkg-config), run
# against a real server: it must take the lease, work, release it, and exit 0. This keeps the
# example, the install rules and mutexd.pc honest.
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

# The fenced c block right after the example's marker.
awk '/<!-- example: guarded-job.c -->/ {found = 1; next}
     found && /^```c$/ {inside = 1; next}
     inside && /^```$/ {exit}
     inside {print}' "$doc" >"$tmp/guarded-job.c"
[ -s "$tmp/guarded-job.c" ] || {
    echo "FAIL: no example in $doc"
    exit 1
}

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
# shellcheck disable=SC2086 # word splitting of the flags is meant
cc -std=c11 -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes ${MUTEXD_TEST_CFLAGS:-} \
    -o "$tmp/guarded-job" "$tmp/guarded-job.c" $flags || {
    echo "FAIL: the example does not build"
    exit 1
}

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
echo "passed"
