#!/usr/bin/env bash
# `make test`: installs what is missing, builds, and runs every suite. Each stage prints
# its name; the first failure stops the run with a non-zero exit.
set -euo pipefail
cd "$(dirname "$0")/.."

JOBS=$(nproc 2>/dev/null || echo 2)
scripts/deps.sh test

# Debian's pytest belongs to Debian's python3, whatever else is first on PATH.
PYTEST=(/usr/bin/python3 -m pytest -q -p no:cacheprovider)

stage() { printf '\n==== %s\n' "$*"; }

configure() { # dir, cmake options...
    local dir=$1
    shift
    cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@" >/dev/null
    cmake --build "$dir" -j "$JOBS"
}

stage "build (RelWithDebInfo)"
configure build

stage "checks: C formatting, include direction, one version, the clients' types, unit-test registration follows the sources"
scripts/check-format.sh
scripts/check-layers.sh
scripts/check-version.sh
scripts/check-types.sh
tests/meta/registration.sh

stage "unit tests"
ctest --test-dir build --output-on-failure -j "$JOBS"

stage "the shipped build configurations: Release as in the Dockerfile, gcc Debug"
tests/bare/build_configs.sh

stage "OpenAPI document"
scripts/check-openapi.sh

stage "integration tests"
MUTEXD_BIN=build/mutexd "${PYTEST[@]}" tests/integration

stage "chaos tests: SIGKILL, failing commits, a full disk"
MUTEXD_BIN=build/mutexd "${PYTEST[@]}" tests/chaos

stage "Python client"
MUTEXD_BIN=build/mutexd "${PYTEST[@]}" clients/python/tests

stage "Node.js client, and its package as npm packs it: installed offline, its README example run"
MUTEXD_BIN=build/mutexd node --test clients/node/test/

stage "Node.js client on Debian 12's Node.js 18, the oldest it supports"
MUTEXD_BIN=build/mutexd clients/node/test-support/debian-node18.sh --test clients/node/test/

stage "docker-compose.yml (checked without a container engine) and its topology run natively"
"${PYTEST[@]}" tests/compose
MUTEXD_BIN=build/mutexd tests/compose/native.sh

stage "the containers: docker compose build and up on podman, leader handovers, blobs in Azurite"
tests/compose/containers.sh

stage "build with AddressSanitizer and UndefinedBehaviorSanitizer"
configure build-asan -DMUTEXD_ASAN=ON
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=0"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"

stage "unit tests under ASan+UBSan"
ctest --test-dir build-asan --output-on-failure -j "$JOBS"

stage "integration tests under ASan+UBSan"
MUTEXD_BIN=build-asan/mutexd "${PYTEST[@]}" -m "not heavy and not examples" tests/integration
unset ASAN_OPTIONS UBSAN_OPTIONS

stage "build with ThreadSanitizer"
configure build-tsan -DMUTEXD_TSAN=ON
export TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1"

stage "runtime and store unit tests under TSan"
ctest --test-dir build-tsan --output-on-failure -L "runtime|store"

stage "integration tests under TSan"
MUTEXD_BIN=build-tsan/mutexd "${PYTEST[@]}" -m "not heavy and not examples" tests/integration
unset TSAN_OPTIONS

stage "make run on a bare Debian 12, as the README's quick start says"
tests/bare/make_run.sh

stage "fuzzers, 30 s each"
scripts/fuzz.sh 30

stage "all passed"
