#!/usr/bin/env bash
# Builds the Java leader-election worker, with the client's sources, into one runnable jar
# (javac and jar alone; nothing downloaded):
#
#   clients/examples/java/leader/build.sh OUT.jar
#   java -jar OUT.jar
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
client=$here/../../../java/src
[ $# -eq 1 ] || { echo "usage: $0 OUT.jar" >&2; exit 2; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/mutexd-java-leader.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
javac -Xlint:all -Werror --release 17 -d "$tmp" "$here/Leader.java" $(find "$client" -name '*.java')
jar --create --file "$1" --main-class Leader -C "$tmp" .
