#!/usr/bin/env bash
# `make bench`: the benchmarks, on demand, not part of `make test`. Prints the figures.
#   the actor runtime alone (bench/rt_bench), the store's commit against the disk's own
#   fdatasync (bench/commit_bench), then mutexd side by side with Redis and etcd
#   (bench/compare.sh; BENCH_ARGS=--quick for a short run).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}

echo "machine: $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo), $(uname -sr)"
echo "commit:  $(git rev-parse --short HEAD 2>/dev/null || echo none)"
echo
"$BUILD"/rt_bench
echo
"$BUILD"/commit_bench
echo
# shellcheck disable=SC2086
bench/compare.sh ${BENCH_ARGS:-}
