#!/usr/bin/env bash
# The version is written once, in VERSION (CMake reads it for the server, mutexctl and
# libmutexd). Every place that must state it literally (the packages, the clients' own
# constants, the image's label, the Debian changelog's newest entry) is checked against it
# here.
set -euo pipefail
cd "$(dirname "$0")/.."
v=$(head -n1 VERSION)
fail=0
check() { # file, the version as found there
    if [ "$2" != "$v" ]; then
        echo "version: $1 says '$2', VERSION says '$v'" >&2
        fail=1
    fi
}
check clients/node/package.json "$(node -p 'require("./clients/node/package.json").version')"
check clients/node/src/transport.js "$(sed -n "s/^export const VERSION = '\(.*\)';$/\1/p" clients/node/src/transport.js)"
check clients/python/pyproject.toml "$(sed -n 's/^version = "\(.*\)"$/\1/p' clients/python/pyproject.toml)"
check clients/c/include/mutexd.h "$(sed -n 's/^#define MUTEXD_CLIENT_VERSION_STRING "\(.*\)"$/\1/p' clients/c/include/mutexd.h)"
check Dockerfile "$(sed -n 's/^ARG VERSION=\(.*\)$/\1/p' Dockerfile)"
check packaging/debian/changelog "$(sed -n '1s/^mutexd (\(.*\)) .*/\1/p' packaging/debian/changelog)"
[ "$fail" -eq 0 ] || exit 1
echo "version: $v everywhere it is written"
