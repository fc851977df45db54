#!/usr/bin/env bash
# Every build configuration the project ships compiles, with -Werror, and behaves as
# shipped:
#   - the Dockerfile's: Release, no unit tests, no fault seam, no libsystemd; targets mutexd
#     and mutexctl. Its mutexd must refuse MUTEXD_FAULT_COMMIT and link no libsystemd (the
#     sd_notify code compiles to nothing without it).
#   - a gcc Debug build of everything (unit tests included).
# Each in its own build folder, two jobs at a time; rebuilds only what changed.
#
#   tests/bare/build_configs.sh
set -euo pipefail
cd "$(dirname "$0")/../.."

build() { # dir, targets (empty: all), cmake options...
    local dir=$1 targets=$2
    shift 2
    mkdir -p "$dir"
    cmake -S . -B "$dir" "$@" >"$dir/configure.log" 2>&1 || {
        cat "$dir/configure.log" >&2
        echo "build_configs: configuring $dir ($*) failed" >&2
        exit 1
    }
    # shellcheck disable=SC2086 # the targets are words
    MAKEFLAGS=--no-print-directory cmake --build "$dir" -j 2 ${targets:+--target $targets}
}

echo "build_configs: Release as the Dockerfile builds it" >&2
build build-release "mutexd mutexctl" -DCMAKE_BUILD_TYPE=Release -DMUTEXD_TESTS=OFF \
    -DMUTEXD_FAULT_INJECTION=OFF -DMUTEXD_SYSTEMD=OFF
if ldd build-release/mutexd | grep -q libsystemd ||
    ! build-release/mutexd --version | grep -q -- '-systemd'; then
    echo "build_configs: the Release mutexd built with MUTEXD_SYSTEMD=OFF has libsystemd:" >&2
    build-release/mutexd --version >&2
    exit 1
fi
if out=$(MUTEXD_FAULT_COMMIT=1 timeout 10 build-release/mutexd --listen 127.0.0.1:0 \
    --data-dir build-release/fault-check 2>&1); then
    echo "build_configs: the Release mutexd accepted MUTEXD_FAULT_COMMIT: $out" >&2
    exit 1
fi
case $out in
*"this build has no fault injection"*) ;;
*)
    echo "build_configs: the Release mutexd did not refuse MUTEXD_FAULT_COMMIT: $out" >&2
    exit 1
    ;;
esac
[ ! -e build-release/fault-check ] || {
    echo "build_configs: the refused Release mutexd created its data directory" >&2
    exit 1
}

echo "build_configs: Debug, everything, with gcc" >&2
CC=gcc build build-debug "" -DCMAKE_BUILD_TYPE=Debug
echo "build_configs: both configurations compiled" >&2
