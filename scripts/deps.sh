#!/usr/bin/env bash
# Installs what the build and the tests need and is not there yet, from Debian's
# packages only. With nothing missing it does nothing, so `make` stays quick.
#
#   scripts/deps.sh build   compilers, CMake and the libraries the server links
#   scripts/deps.sh test    the above, plus what the test suites run
set -euo pipefail

build_pkgs=(build-essential cmake pkg-config
    libmicrohttpd-dev libcjson-dev libsqlite3-dev libcurl4-openssl-dev libssl-dev)
test_pkgs=(libcmocka-dev python3 python3-pytest python3-yaml curl openssl docker-compose)
# The container stage (tests/compose/containers.sh): podman with runc and its network
# stack, and debootstrap for the base image where no image registry is reachable.
test_pkgs+=(podman runc netavark aardvark-dns iptables debootstrap)
# Node.js and npm run Azurite, the OpenAPI check and the Node client's tests. A machine
# that has a node already (from any source) keeps it.
if [ "${1:-build}" = test ] && ! command -v node >/dev/null; then
    test_pkgs+=(nodejs npm)
fi

want=("${build_pkgs[@]}")
if [ "${1:-build}" = test ]; then
    want+=("${test_pkgs[@]}")
fi

missing=()
for p in "${want[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q '^install ok installed$'; then
        missing+=("$p")
    fi
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "deps: installing ${missing[*]}" >&2
sudo=()
if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null || { echo "deps: need root or sudo to install: ${missing[*]}" >&2; exit 1; }
    sudo=(sudo)
fi
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -qq
"${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
