#!/usr/bin/env bash
# `make test` and `make check`: install what is missing, build, and run the suites, stage by
# stage. Each stage prints its name when it starts and its duration when it ends; the first
# failure stops the run with a non-zero exit, and every run ends with a table of the stages
# run (seconds and result), also when one failed.
#
#   scripts/test.sh           `make test`: every stage below
#   scripts/test.sh --quick   `make check`, the everyday loop: the stages before "the rest
#                             of make test" below (build, the checks, the unit tests, the
#                             OpenAPI check), then the integration tests but those marked
#                             heavy or examples, on PYTEST_WORKERS pytest-xdist workers
#                             (default 2). No container, no sanitizer, nothing that needs
#                             root but the package install of scripts/deps.sh check.
set -euo pipefail
cd "$(dirname "$0")/.."

quick=false
case "${1:-}" in
--quick) quick=true ;;
"") ;;
*)
    echo "usage: scripts/test.sh [--quick]" >&2
    exit 2
    ;;
esac

JOBS=$(nproc 2>/dev/null || echo 2)

# Every test removes what it makes in /tmp, also after a kill or a failure: the run ends
# with a stage that fails naming each mutexd-* entry of /tmp it did not start with. (A run
# of the tests elsewhere on the machine at the same time adds its own, which it names too.)
tmp_entries() { find /tmp -mindepth 1 -maxdepth 1 -name 'mutexd-*' -printf '%f\n' | sort; }
tmp_before=$(tmp_entries)
nothing_left_in_tmp() {
    local left
    left=$(comm -13 <(printf '%s\n' "$tmp_before") <(tmp_entries) | sed '/^$/d')
    if [ -n "$left" ]; then
        echo "the tests left in /tmp:" >&2
        while IFS= read -r e; do echo "  /tmp/$e"; done <<<"$left" >&2
        return 1
    fi
    echo "no mutexd-* entry left in /tmp"
}
if $quick; then
    scripts/deps.sh check
else
    scripts/deps.sh test
fi

# Debian's pytest belongs to Debian's python3, whatever else is first on PATH.
PYTEST=(/usr/bin/python3 -m pytest -q -p no:cacheprovider)

# ---- stages: timing and the summary table ------------------------------------------------

names=() secs=() results=()
current="" started=0

now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

# Ends the running stage (if any) with result $1.
end_stage() {
    [ -n "$current" ] || return 0
    local s
    s=$(elapsed "$started")
    names+=("$current") secs+=("$s") results+=("$1")
    printf -- '---- %s: %s in %s s\n' "$current" "$1" "$s"
    current=""
}

# stage NAME: ends the previous stage as passed and starts NAME.
stage() {
    end_stage passed
    current=$*
    started=$(now)
    printf '\n==== %s\n' "$*"
}

summary() {
    local rc=$? i total=0
    set +e
    end_stage "$([ "$rc" -eq 0 ] && echo passed || echo "FAILED ($rc)")"
    printf '\n%8s  %-12s  %s\n' seconds result stage
    for i in "${!names[@]}"; do
        printf '%8s  %-12s  %s\n' "${secs[$i]}" "${results[$i]}" "${names[$i]}"
        total=$(awk -v a="$total" -v b="${secs[$i]}" 'BEGIN { printf "%.1f", a + b }')
    done
    printf '%8s  %-12s  %s\n' "$total" "$([ "$rc" -eq 0 ] && echo passed || echo FAILED)" \
        "total ($($quick && echo "make check" || echo "make test"))"
    [ "$rc" -ne 0 ] || printf '\nall passed\n'
    exit "$rc"
}
trap summary EXIT
# Killed or interrupted, bash would run the EXIT trap with the status of the last command
# that ended (0: "passed"); exit with the signal's status instead.
trap 'exit 130' INT
trap 'exit 143' TERM

configure() { # dir, cmake options...
    local dir=$1
    shift
    cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@" >/dev/null
    cmake --build "$dir" -j "$JOBS"
}

# ---- make check and make test ------------------------------------------------------------

stage "build (RelWithDebInfo)"
configure build

# C formatting, include direction (and no circle among http/'s files), one version, the
# clients' types, unit-test registration follows the sources, every document named is in
# the repository (and that check's test), the man pages and /etc/default/mutexd say what
# --help says, mutexctl's bash completion.
stage "checks: format, layers, version, types, test registration, doc links, man pages, completion"
scripts/check-format.sh
scripts/check-layers.sh
scripts/check-layers.sh --files http
scripts/check-layers.sh --files server
scripts/check-version.sh
scripts/check-types.sh
tests/meta/registration.sh
scripts/check-doc-links.sh
tests/meta/doc_links.sh
scripts/check-man.sh
tests/meta/completion.sh

stage "unit tests"
ctest --test-dir build --output-on-failure -j "$JOBS"

stage "OpenAPI document, and its agreement with docs/api.md"
scripts/check-openapi.sh

# The tests are independent (each starts its own servers and Azurite on free ports) and
# mostly wait on them, so two workers share even two cores well. Those marked heavy (the
# long load and fault tests of a server group, whose timings a busy machine would blur) and
# examples (the example workers) run one at a time, in make test.
stage "integration tests, but those marked heavy or examples, on ${PYTEST_WORKERS:-2} workers"
MUTEXD_BIN=build/mutexd "${PYTEST[@]}" -n "${PYTEST_WORKERS:-2}" \
    -m "not heavy and not examples" tests/integration
if $quick; then
    stage "nothing left in /tmp"
    nothing_left_in_tmp
    exit 0
fi

# ---- the rest of make test ---------------------------------------------------------------

stage "the shipped build configurations: Release as in the Dockerfile, gcc Debug"
tests/bare/build_configs.sh

# make install's tree against its list, a program linked through the installed mutexd.pc;
# make deb and lintian; the .deb installed, run and removed in a chroot of a pristine Debian
# 12 and under systemd in a container (tests/packaging/run.sh; root for the last two).
stage "packaging: make install layout, the .deb on a pristine Debian 12 (chroot, systemd)"
tests/packaging/run.sh

stage "integration tests marked heavy or examples, one at a time"
MUTEXD_BIN=build/mutexd "${PYTEST[@]}" --durations=15 -m "heavy or examples" \
    --ignore=tests/integration/test_ha_nemesis.py tests/integration

# The two randomized runs (one partition, eight) check histories, not timings: side by side.
stage "the randomized fault runs, two at once"
MUTEXD_BIN=build/mutexd "${PYTEST[@]}" -n 2 tests/integration/test_ha_nemesis.py

stage "chaos tests: SIGKILL, failing commits, a full disk"
MUTEXD_BIN=build/mutexd "${PYTEST[@]}" tests/chaos

stage "Python client"
MUTEXD_BIN=build/mutexd "${PYTEST[@]}" clients/python/tests

stage "Node.js client, and its package as npm packs it: installed offline, its README example run"
MUTEXD_BIN=build/mutexd node --test clients/node/test/

stage "Node.js client on Debian 12's Node.js 18, the oldest it supports"
MUTEXD_BIN=build/mutexd clients/node/test-support/debian-node18.sh --test clients/node/test/

stage "Go client: gofmt, go vet, go test (and -race on the lock's renewal), its example worker"
MUTEXD_BIN=build/mutexd clients/go/test.sh

stage "Java client: javac, its tests against real servers, its example worker"
MUTEXD_BIN=build/mutexd clients/java/test.sh

# Skipped, saying why, where the .NET SDK is missing (Debian 12 does not package it); CI
# (CI=true) fails instead, so that it always runs here.
stage ".NET client: dotnet build, its xunit tests against real servers, its example worker"
MUTEXD_BIN=build/mutexd clients/dotnet/test.sh

# The dashboard (/ui/) in Debian's Chromium, headless (--no-sandbox: CI runs as root), with
# real servers, a server group on Azurite among them (tests/browser).
stage "browser tests (Chromium, headless)"
MUTEXD_BIN=build/mutexd scripts/browser-tests.sh

stage "docker-compose.yml (checked without a container engine) and its topology run natively"
"${PYTEST[@]}" tests/compose
MUTEXD_BIN=build/mutexd tests/compose/native.sh

stage "the containers: docker compose build and up on podman, leader handovers, blobs in Azurite"
tests/compose/containers.sh

# Right after the containers, whose images it plays: deploy/kubernetes's pods (rendered by
# kubectl kustomize) under podman kube play, a group of three whose active is killed.
stage "the Kubernetes pod template under podman kube play: a group of three, its active killed"
tests/deploy/kube.sh

# deploy/: the Kubernetes manifests against the Kubernetes schemas, the alert rules with
# promtool, and a live group scraped by Prometheus for every metric the rules and the
# Grafana dashboard name.
stage "the operator's kit: manifests and alert rules checked, a group scraped by Prometheus"
tests/deploy/static.sh
MUTEXD_BIN=build/mutexd /usr/bin/python3 tests/deploy/scrape.py

stage "build with AddressSanitizer and UndefinedBehaviorSanitizer"
configure build-asan -DMUTEXD_ASAN=ON
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=0"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"

stage "unit tests under ASan+UBSan"
ctest --test-dir build-asan --output-on-failure -j "$JOBS"

stage "integration tests under ASan+UBSan, on ${PYTEST_WORKERS:-2} workers"
MUTEXD_BIN=build-asan/mutexd "${PYTEST[@]}" -n "${PYTEST_WORKERS:-2}" -m "not heavy and not examples" tests/integration
unset ASAN_OPTIONS UBSAN_OPTIONS

stage "build with ThreadSanitizer"
configure build-tsan -DMUTEXD_TSAN=ON
export TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1"

stage "runtime, store and core unit tests under TSan"
ctest --test-dir build-tsan --output-on-failure -L "runtime|store"

stage "integration tests under TSan, on ${PYTEST_WORKERS:-2} workers"
MUTEXD_BIN=build-tsan/mutexd "${PYTEST[@]}" -n "${PYTEST_WORKERS:-2}" -m "not heavy and not examples" tests/integration
unset TSAN_OPTIONS

stage "make run on a bare Debian 12, as the README's quick start says"
tests/bare/make_run.sh

stage "fuzzers, 30 s each"
scripts/fuzz.sh 30

stage "nothing left in /tmp"
nothing_left_in_tmp
