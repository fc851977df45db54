#!/usr/bin/env bash
# Builds the Java client with the JDK alone (javac and jar; nothing downloaded):
#
#   clients/java/build.sh OUT.jar [CLASSES-DIR]
#
# OUT.jar is io.mutexd, compiled for Java 17 with every lint warning an error. The classes
# go to CLASSES-DIR (default: a temporary directory, removed).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
[ $# -ge 1 ] || { echo "usage: $0 OUT.jar [CLASSES-DIR]" >&2; exit 2; }
out=$1
tmp=$(mktemp -d "${TMPDIR:-/tmp}/mutexd-java-build.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
classes=${2:-$tmp/classes}
mkdir -p "$classes"
javac -Xlint:all -Werror --release 17 -d "$classes" $(find "$here/src" -name '*.java')
version=$(sed -n 's/.*String VERSION = "\(.*\)";/\1/p' "$here/src/io/mutexd/Client.java")
manifest=$tmp/manifest
printf 'Automatic-Module-Name: io.mutexd\nImplementation-Title: mutexd-client\nImplementation-Version: %s\n' \
    "$version" >"$manifest"
jar --create --file "$out" --manifest "$manifest" -C "$classes" .
