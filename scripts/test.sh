#!/usr/bin/env bash
# `make test`: installs what is missing, builds, and runs every suite. Each stage prints
# its name; the first failure stops the run with a non-zero exit.
set -euo pipefail
cd "$(dirname "$0")/.."

JOBS=$(nproc 2>/dev/null || echo 2)
scripts/deps.sh test

stage() { printf '\n==== %s\n' "$*"; }

configure() { # dir, cmake options...
    local dir=$1
    shift
    cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@" >/dev/null
    cmake --build "$dir" -j "$JOBS"
}

stage "build (RelWithDebInfo)"
configure build

stage "unit tests"
ctest --test-dir build --output-on-failure -j "$JOBS"

stage "unit tests under ThreadSanitizer (runtime)"
configure build-tsan -DMUTEXD_TSAN=ON
TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" \
    ctest --test-dir build-tsan --output-on-failure -L runtime

stage "unit tests under AddressSanitizer and UndefinedBehaviorSanitizer"
configure build-asan -DMUTEXD_ASAN=ON
ASAN_OPTIONS="detect_leaks=1" UBSAN_OPTIONS="print_stacktrace=1" \
    ctest --test-dir build-asan --output-on-failure -j "$JOBS"

stage "all passed"
