#!/usr/bin/env bash
# The .NET client's checks: a build of the solution (every warning an error) and its xunit
# tests against real servers (the example worker's too), with a plain closing line
# `N passed, N failed`.
#
#   MUTEXD_BIN=build/mutexd clients/dotnet/test.sh [DOTNET-TEST-FILTER]
#
# Needs the .NET SDK 10 (`dotnet` on PATH). Debian 12 does not package it: without it this
# stage says it is skipped and why, and exits 0, unless CI=true, where it fails. Packages
# come from the NuGet sources configured for the user, plus the folder MUTEXD_NUGET_FOLDER
# (default /opt/nuget/packages, when it exists) that holds the test packages offline. The
# tests start real servers (MUTEXD_BIN, else build/mutexd) and, for the server-group
# tests, Azurite (scripts/azurite.sh). The build's output, the servers' data and Azurite's go
# to one temporary directory, removed at the end, and no build server outlives the run.
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
me=clients/dotnet/test.sh
if ! command -v dotnet >/dev/null; then
    if [ "${CI:-}" = true ]; then
        echo "$me: dotnet is not installed, and CI runs the .NET stage: install the .NET SDK 10" >&2
        exit 1
    fi
    echo "$me: the .NET stage is skipped: dotnet is not installed (the .NET SDK 10 is not a Debian 12 package)"
    exit 0
fi

bin=${MUTEXD_BIN:-$root/build/mutexd}
case $bin in
/*) ;;
*) bin=$PWD/$bin ;;
esac
[ -x "$bin" ] || {
    echo "$me: no mutexd binary at $bin (run make build, or set MUTEXD_BIN)" >&2
    exit 1
}
export MUTEXD_BIN=$bin MUTEXD_ROOT=$root
export DOTNET_CLI_TELEMETRY_OPTOUT=1 DOTNET_NOLOGO=1 DOTNET_CLI_USE_MSBUILD_SERVER=0 MSBUILDDISABLENODEREUSE=1
export DOTNET_CLI_WORKLOAD_UPDATE_NOTIFY_DISABLE=true DOTNET_SKIP_FIRST_TIME_EXPERIENCE=1

work=$(mktemp -d "${TMPDIR:-/tmp}/mutexd-dotnet.XXXXXX")
cleanup() {
    dotnet build-server shutdown >/dev/null 2>&1 || true
    rm -rf "$work"
}
trap cleanup EXIT
mkdir -p "$work/tmp"
# MSBuild, NuGet and the runtime's diagnostic sockets write to TMPDIR: here, not /tmp.
export TMPDIR=$work/tmp

props=(-c Release -p:UseSharedCompilation=false -nodeReuse:false --artifacts-path "$work/artifacts")
folder=${MUTEXD_NUGET_FOLDER:-/opt/nuget/packages}
restore=()
[ -d "$folder" ] && restore=("-p:RestoreAdditionalProjectSources=$folder")

echo "== clients/dotnet: dotnet build (warnings are errors)" >&2
dotnet build "$root/clients/dotnet/Mutexd.slnx" "${props[@]}" "${restore[@]}" -warnaserror -v:quiet -clp:NoSummary
leader_dir=$root/clients/examples/dotnet/leader
if [ -d "$leader_dir" ]; then
    echo "== clients/examples/dotnet/leader: dotnet build" >&2
    dotnet build "$leader_dir" "${props[@]}" "${restore[@]}" -warnaserror -v:quiet -clp:NoSummary
    export MUTEXD_DOTNET_LEADER=$work/artifacts/bin/Leader/release/Leader.dll
fi

echo "== clients/dotnet: the tests, against real servers" >&2
filter=()
[ $# -gt 0 ] && filter=(--filter "$1")
rc=0
dotnet test "$root/clients/dotnet/Mutexd.Client.Tests" --no-build "${props[@]}" "${filter[@]}" \
    --logger "trx;LogFileName=results.trx" --results-directory "$work/results" || rc=$?

trx=$work/results/results.trx
if [ -f "$trx" ]; then
    counters=$(grep -o '<Counters [^>]*>' "$trx" | head -1)
    num() { echo "$counters" | grep -o " $1=\"[0-9]*\"" | grep -o '[0-9]*'; }
    # The failed tests by name, where a log's tail shows them.
    grep -o '<UnitTestResult [^>]*outcome="Failed"[^>]*>' "$trx" | grep -o 'testName="[^"]*"' |
        sed 's/^testName="\(.*\)"$/failed: \1/' || true
    echo "$(num passed) passed, $(num failed) failed"
else
    echo "0 passed, 1 failed"
    [ "$rc" -ne 0 ] || rc=1
fi
exit "$rc"
