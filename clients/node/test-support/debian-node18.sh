#!/usr/bin/env bash
# Runs Debian 12's Node.js 18 (the oldest Node the client supports) with the given arguments,
# beside whatever node the machine has: the packages nodejs and libnode108 of the newest
# bookworm 18.x version are downloaded with `apt-get download` and unpacked with `dpkg -x` into
# ~/.cache/mutexd/debian-node-<version>, once; nothing is installed.
#
#   clients/node/test-support/debian-node18.sh --test clients/node/test/
#
# What else Debian's node 18 needs is installed by scripts/deps.sh test: the shared libraries
# libnode108 links (libuv1, libc-ares2, libnghttp2-14, libbrotli1, libicu72, libssl3), and the
# JavaScript it loads from /usr/share/nodejs at start (node-acorn, node-cjs-module-lexer,
# node-undici), which no other node uses.
set -euo pipefail

version=$(apt-cache madison nodejs | awk '$3 ~ /^18\./ && $3 ~ /deb12/ { print $3 }' | sort -V | tail -n 1)
if [ -z "$version" ]; then
    echo "debian-node18: no Debian 12 nodejs 18 in the apt sources (apt-get update?)" >&2
    exit 3
fi
cache=${XDG_CACHE_HOME:-$HOME/.cache}/mutexd/debian-node-$version
if [ ! -x "$cache/usr/bin/node" ]; then
    mkdir -p "$(dirname "$cache")"
    tmp=$(mktemp -d "$cache.XXXXXX")
    trap 'rm -rf "$tmp"' EXIT
    chmod 755 "$tmp" # apt-get download may write as its sandbox user
    (cd "$tmp" && apt-get download -q "nodejs=$version" "libnode108=$version" >&2)
    mkdir "$tmp/root"
    for deb in "$tmp"/*.deb; do
        dpkg -x "$deb" "$tmp/root"
    done
    rm -rf "$cache"
    mv "$tmp/root" "$cache"
    rm -rf "$tmp"
    trap - EXIT
fi
lib=$cache/usr/lib/$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || gcc -dumpmachine)
export LD_LIBRARY_PATH=$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
exec "$cache/usr/bin/node" "$@"
