#!/usr/bin/env bash
# Installs what the build and the tests need and is not there yet, from Debian's
# packages only. With nothing missing it does nothing, so `make` stays quick.
#
#   scripts/deps.sh build   compilers, CMake and the libraries the server links
#   scripts/deps.sh check   the above, plus what `make check` runs: the checks, the unit and
#                           integration tests (pytest, Node.js for Azurite, Chromium, ...)
#   scripts/deps.sh test    the above, plus what the other suites of `make test` run
#   scripts/deps.sh deb     the build's, plus what `make deb` needs: dpkg-dev, file,
#                           libsystemd-dev
#   scripts/deps.sh azurite Node.js and npm, which run Azurite (`make azurite`)
#   scripts/deps.sh docs    Graphviz, which draws docs/architecture.svg (`make diagram`)
set -euo pipefail

# libcmocka-dev: the default CMake configuration (MUTEXD_TESTS=ON, `make build`) compiles
# the unit tests; `make run` builds the server alone and would do without it.
build_pkgs=(build-essential cmake pkg-config
    libmicrohttpd-dev libcjson-dev libsqlite3-dev libcurl4-openssl-dev libssl-dev libcmocka-dev
    zlib1g-dev)
# `make deb`: dpkg-buildflags and dpkg-shlibdeps (dpkg-dev), file, with which CPack finds
# the binaries whose libraries make the package's Depends, and libsystemd-dev: the package's
# server notifies systemd (MUTEXD_SYSTEMD=ON).
deb_pkgs=(dpkg-dev file libsystemd-dev)
# What `make check` runs. python3-pytest-xdist: its integration tests on two workers;
# chromium: a real browser, headless, for the web-page attacks
# (tests/integration/test_hardening.py); openssl: the TLS tests; mypy: scripts/check-types.sh.
check_pkgs=(python3 python3-pytest python3-pytest-xdist curl openssl clang-format chromium mypy)
# libsystemd-dev: the test build (build/) then has sd_notify (CMake MUTEXD_SYSTEMD=AUTO), which
# tests/integration/test_systemd.py tests; `make run` and the image build without it.
check_pkgs+=(libsystemd-dev)
# scripts/check-man.sh formats the man pages (packaging/man) and fails on any warning.
check_pkgs+=(man-db groff-base)
# python3-yaml and docker-compose: the compose stages.
test_pkgs=(python3-yaml docker-compose)
# The Python client's documented install (a venv, offline).
test_pkgs+=(python3-venv python3-wheel)
# Debian 12's Node.js 18, unpacked beside any other node by
# clients/node/test-support/debian-node18.sh: its libraries and the builtins it loads.
test_pkgs+=(libuv1 libc-ares2 libnghttp2-14 libbrotli1 libicu72 libssl3
    node-acorn node-cjs-module-lexer node-undici)
# The container stage (tests/compose/containers.sh): podman with runc and its network
# stack, and debootstrap for the base image where no image registry is reachable.
test_pkgs+=(podman runc netavark aardvark-dns iptables debootstrap)
# The Kubernetes pods under `podman kube play` (tests/deploy/kube.sh): catatonit, the
# init of a pod's infra container. promtool and the Prometheus server for the alert rules
# and the scrape of a live group (tests/deploy/static.sh, scrape.py).
test_pkgs+=(catatonit prometheus)
# test_readme.py runs the documents' commands in a network namespace of their own (unshare,
# and ip to bring its loopback up), where the ports they name are free.
test_pkgs+=(util-linux iproute2)
# The README's diagram is drawn from its source, and test_readme.py checks that it still is.
doc_pkgs=(graphviz)
test_pkgs+=("${doc_pkgs[@]}")
# Node.js and npm run Azurite, the OpenAPI check and the Node client's tests. A machine
# that has a node already (from any source) keeps it.
node_pkgs=()
if ! command -v node >/dev/null; then
    node_pkgs=(nodejs npm)
fi
check_pkgs+=("${node_pkgs[@]}")
# The packaging stage (tests/packaging/run.sh): make deb, and lintian on its package.
test_pkgs+=("${deb_pkgs[@]}" lintian)
# The server group's fault tests run a server with its clock ahead (libfaketime).
test_pkgs+=(faketime)
# The Go client and its example worker: Debian 12's Go (1.19), the standard library only.
test_pkgs+=(golang-go)
# The Java client and its example worker: javac and jar (clients/java/test.sh).
test_pkgs+=(openjdk-17-jdk-headless)

case "${1:-build}" in
build) want=("${build_pkgs[@]}") ;;
check) want=("${build_pkgs[@]}" "${check_pkgs[@]}") ;;
test) want=("${build_pkgs[@]}" "${check_pkgs[@]}" "${test_pkgs[@]}") ;;
deb) want=("${build_pkgs[@]}" "${deb_pkgs[@]}") ;;
azurite) want=("${node_pkgs[@]}") ;;
docs) want=("${doc_pkgs[@]}") ;;
*)
    echo "usage: scripts/deps.sh build | check | test | deb | azurite | docs" >&2
    exit 2
    ;;
esac

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
