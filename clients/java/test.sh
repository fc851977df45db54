#!/usr/bin/env bash
# The Java client's checks: javac (with every lint warning an error) and jar of the client,
# the example worker's (clients/examples/java/leader), and the tests of both against real
# servers, in one JVM.
# JDK 17, nothing downloaded (no Maven: pom.xml is for users and not built here).
#
#   MUTEXD_BIN=build/mutexd clients/java/test.sh [TEST-NAME-PART...]
#
# Needs a JDK 17 or later (Debian: openjdk-17-jdk-headless). The tests start real servers
# (MUTEXD_BIN, else build/mutexd; a missing binary fails them) and, for the server-group
# test, Azurite (scripts/azurite.sh installs it with npm in tests/azurite). The classes,
# the servers' data and Azurite's go to one temporary directory, removed at the end.
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
die() {
    echo "clients/java/test.sh: $*" >&2
    exit 1
}
command -v javac >/dev/null || die "javac is not installed (Debian: apt-get install openjdk-17-jdk-headless)"
command -v jar >/dev/null || die "jar is not installed (Debian: apt-get install openjdk-17-jdk-headless)"

bin=${MUTEXD_BIN:-$root/build/mutexd}
case $bin in
/*) ;;
*) bin=$PWD/$bin ;;
esac
[ -x "$bin" ] || die "no mutexd binary at $bin (run make build, or set MUTEXD_BIN)"
export MUTEXD_BIN=$bin

work=$(mktemp -d "${TMPDIR:-/tmp}/mutexd-java.XXXXXX")
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/tmp"

echo "== clients/java: javac, jar" >&2
"$root/clients/java/build.sh" "$work/mutexd-client.jar" "$work/classes"

echo "== clients/examples/java/leader: javac, jar" >&2
"$root/clients/examples/java/leader/build.sh" "$work/leader.jar"

echo "== clients/java: the tests, against real servers (the example worker's too)" >&2
javac -Xlint:all -Werror --release 17 -cp "$work/mutexd-client.jar" -d "$work/test-classes" \
    $(find "$root/clients/java/test" -name '*.java')
java -Djava.io.tmpdir="$work/tmp" -Dmutexd.root="$root" -Dmutexd.leader.jar="$work/leader.jar" \
    -cp "$work/mutexd-client.jar:$work/test-classes" io.mutexd.TestRunner "$@"

