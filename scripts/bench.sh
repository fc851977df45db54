#!/usr/bin/env bash
# `make bench`: runs the benchmarks and prints their figures. Not part of `make test`.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}

echo "machine: $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo), $(uname -sr)"
echo "commit:  $(git rev-parse --short HEAD 2>/dev/null || echo none)"
echo
"$BUILD"/rt_bench
