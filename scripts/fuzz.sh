#!/usr/bin/env bash
# Builds the libFuzzer drivers with clang (ASan and UBSan on) and runs each one for
# SECONDS (default 60), as many at once as there are cores, starting from the committed
# corpus in tests/fuzz/corpus. New inputs go to build-fuzz/corpus, never into the
# repository. A crash fails the run with a non-zero exit and leaves the input in
# build-fuzz/artifacts: add it to the corpus and as a regression test.
#
#   scripts/fuzz.sh [SECONDS]
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-60}
JOBS=$(nproc 2>/dev/null || echo 2)

missing=()
for p in clang libclang-rt-dev; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q '^install ok installed$' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    sudo=(); [ "$(id -u)" -ne 0 ] && sudo=(sudo)
    "${sudo[@]}" apt-get update -qq
    DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

CC=clang cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMUTEXD_FUZZ=ON \
    -DMUTEXD_TESTS=OFF >/dev/null
targets=(route body connstr journal auth admit)
cmake --build build-fuzz -j "$JOBS" --target "${targets[@]/#/fuzz_}" >/dev/null

mkdir -p build-fuzz/artifacts
export ASAN_OPTIONS="detect_leaks=1:allocator_may_return_null=1"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
# One fuzzer a core at a time: each is one process on one core.
fuzz_one() {
    local f=$1 corpus=build-fuzz/corpus/$1
    mkdir -p "$corpus"
    cp -n tests/fuzz/corpus/"$f"/* "$corpus"/ 2>/dev/null || true
    build-fuzz/fuzz_"$f" -max_total_time="$SECS" -max_len=8192 -timeout=10 \
        -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix=build-fuzz/artifacts/"$f"- \
        "$corpus" > build-fuzz/fuzz_"$f".log 2>&1
}
failed=()
for ((i = 0; i < ${#targets[@]}; i += JOBS)); do
    batch=("${targets[@]:i:JOBS}")
    pids=()
    for f in "${batch[@]}"; do
        echo "fuzz_$f: ${SECS}s from $(ls tests/fuzz/corpus/"$f" | wc -l) seeds"
        fuzz_one "$f" &
        pids+=($!)
    done
    for k in "${!batch[@]}"; do
        f=${batch[$k]}
        if ! wait "${pids[$k]}"; then
            tail -n 60 build-fuzz/fuzz_"$f".log
            echo "fuzz_$f: FOUND A CRASH; the input is in build-fuzz/artifacts/" >&2
            failed+=("$f")
            continue
        fi
        printf 'fuzz_%s: ' "$f"
        grep -E "^stat::number_of_executed_units|^stat::new_units_added" build-fuzz/fuzz_"$f".log |
            tr '\n' ' '
        echo
    done
done
if [ ${#failed[@]} -gt 0 ]; then
    echo "fuzz: ${#failed[@]} of ${#targets[@]} found a crash: ${failed[*]}" >&2
    exit 1
fi
echo "fuzz: ${#targets[@]} passed, 0 failed"
