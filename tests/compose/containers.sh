#!/usr/bin/env bash
# The containers for real: builds the images from the repository's Dockerfiles with
# `docker compose build`, brings up docker-compose.yml unchanged, and checks (through
# containers_check.py) that every health check turns healthy, that the three servers
# agree on the partition map and each owns a share (5 or 6 of 16), that exactly one of the
# four workers (Python, Node.js, Go, Java) leads, that its resource is served by its
# partition's owner whichever server is asked, that the servers run as a non-root user,
# that `docker kill` of that owner's container moves its partitions only, to the other two
# within 10 s, while the leader keeps its lease (or takes it again with a higher fencing
# token; no other worker leads in between) and renews it through the new owner, that the
# killed server joins the group again on `docker start`, that `docker kill` of the leader's
# container gives a new leader, in another language, within the TTL plus 2 s and `docker
# stop` of the next one in under 2 s, and that the leases reach Azurite. Prints the
# timings.
#
# The engine is Debian's podman, the `docker` command's stand-in, with Debian's
# docker-compose talking to podman's Docker-compatible API (a `podman system service`
# this script starts on a socket of its own): the commands of the tutorial,
# docs/tutorial.md, "With docker compose", run as written.
#
# The images the Dockerfiles and the compose file name are pulled when a registry answers
# (within 60 s); where none is reachable (the usual case on a test machine), they are made
# locally and kept in podman's image store:
#   debian:bookworm-slim                    the Debian 12 root filesystem of
#                                           scripts/rootfs.sh, imported
#   mcr.microsoft.com/azure-storage/azurite tests/compose/azurite/Dockerfile: Debian's
#                                           nodejs and the Azurite that
#                                           `scripts/azurite.sh install` puts in
#                                           tests/azurite
# each cached under localhost/mutexd-cache/...:<key>, the key being a hash of what it is
# made from, and rebuilt only when that changes.
#
# Settings for this run only, in a containers.conf of its own (CONTAINERS_CONF), since a
# test machine may be a container itself: the runc runtime (crun refuses a hybrid cgroup
# layout), cgroupfs, containers' open-file and process limits no higher than this shell's
# hard limits and kernel.pid_max (podman's default, 1048576, fails without
# CAP_SYS_RESOURCE), logs and events in files. Without systemd, podman schedules no health
# checks: this script runs `podman healthcheck run` itself every 2 s.
#
# It leaves no container, volume, network or podman service behind, even when it fails.
#
#   tests/compose/containers.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
# shellcheck source=../lib/isolation.sh
. tests/lib/isolation.sh

export COMPOSE_PROJECT_NAME=${COMPOSE_PROJECT_NAME:-mutexdtest}
# Docker's CLI builder is not there; docker-compose builds through the API.
export COMPOSE_DOCKER_CLI_BUILD=0 DOCKER_BUILDKIT=0

WORK=$(mktemp -d "${TMPDIR:-/tmp}/mutexd-containers.XXXXXX")
service_pid=""
health_pid=""
az_pid=""

note() { printf 'containers: %s\n' "$*"; }
fail() { printf 'containers: FAILED: %s\n' "$*" >&2; exit 1; }
now() { date +%s.%N; }
since() { /usr/bin/python3 -c 'import sys, time; print("%.1f" % (time.time() - float(sys.argv[1])))' "$1"; }

# `docker` is podman here, and `docker compose` is docker-compose on podman's socket.
docker() {
    if [ "${1:-}" = compose ]; then
        shift
        docker-compose "$@"
    else
        podman "$@"
    fi
}

cleanup() {
    local rc=$?
    set +e
    if [ $rc -ne 0 ] && [ -S "$WORK/podman.sock" ]; then
        echo "--- docker compose ps" >&2
        docker compose ps >&2 2>&1
        for c in $(podman ps -aq --filter "label=com.docker.compose.project=$COMPOSE_PROJECT_NAME"); do
            echo "--- logs of $(podman inspect --format '{{.Name}}' "$c")" >&2
            podman logs --tail 15 "$c" >&2 2>&1
            podman inspect "$c" | /usr/bin/python3 -c '
import json, sys
state = json.load(sys.stdin)[0]["State"]
h = state.get("Health") or state.get("Healthcheck") or {}
log = h.get("Log") or []
if h.get("Status"):
    print("health: %s; last check: %s" % (h["Status"], (log[-1].get("Output") or "").strip() if log else "none"))' >&2
        done
    fi
    if [ -n "$health_pid" ]; then
        local children
        children=$(pgrep -P "$health_pid") # its sleep or check under way
        kill "$health_pid" $children 2>/dev/null
        wait "$health_pid" 2>/dev/null
    fi
    [ -n "$az_pid" ] && kill "$az_pid" 2>/dev/null && wait "$az_pid" 2>/dev/null
    if [ -S "$WORK/podman.sock" ]; then
        docker compose down -v --remove-orphans -t 5 >/dev/null 2>&1
    fi
    # Whatever compose could not remove (or if the service never came up), by label.
    for c in $(podman ps -aq --filter "label=com.docker.compose.project=$COMPOSE_PROJECT_NAME"); do
        podman rm -f -t 0 "$c" >/dev/null 2>&1
    done
    for v in $(podman volume ls -q --filter "label=com.docker.compose.project=$COMPOSE_PROJECT_NAME"); do
        podman volume rm -f "$v" >/dev/null 2>&1
    done
    for n in $(podman network ls -q --filter "label=com.docker.compose.project=$COMPOSE_PROJECT_NAME"); do
        podman network rm -f "$n" >/dev/null 2>&1
    done
    if [ -n "$service_pid" ]; then
        kill "$service_pid" 2>/dev/null
        wait "$service_pid" 2>/dev/null
    fi
    rm -rf "$WORK"
    exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

[ "$(id -u)" -eq 0 ] || fail "needs root: it runs podman rootful (no user namespaces)"
command -v podman >/dev/null || fail "podman is not installed (scripts/deps.sh test installs it)"
command -v docker-compose >/dev/null || fail "docker-compose is not installed (scripts/deps.sh test installs it)"

# ---- this run's podman settings (tests/lib/isolation.sh) ---------------------------------
podman_settings "$WORK"

podman system service --time=0 "unix://$WORK/podman.sock" >"$WORK/service.log" 2>&1 &
service_pid=$!
export DOCKER_HOST=unix://$WORK/podman.sock
for _ in $(seq 1 100); do
    [ -S "$WORK/podman.sock" ] && break
    sleep 0.1
done
[ -S "$WORK/podman.sock" ] || { cat "$WORK/service.log" >&2; fail "podman's API service did not start"; }

# Ports of this machine for the three servers (the compose file's defaults are 8080, 8081
# and 8082).
free_port() { /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
export MUTEXD_HOST_PORT=${MUTEXD_HOST_PORT:-$(free_port)}
export MUTEXD_HOST_PORT_B=${MUTEXD_HOST_PORT_B:-$(free_port)}
export MUTEXD_HOST_PORT_C=${MUTEXD_HOST_PORT_C:-$(free_port)}
[ "$MUTEXD_HOST_PORT" != "$MUTEXD_HOST_PORT_B" ] || MUTEXD_HOST_PORT_B=$(free_port)
while [ "$MUTEXD_HOST_PORT_C" = "$MUTEXD_HOST_PORT" ] || [ "$MUTEXD_HOST_PORT_C" = "$MUTEXD_HOST_PORT_B" ]; do
    MUTEXD_HOST_PORT_C=$(free_port)
done

# A run killed before its cleanup left these; the project name is this script's own.
docker compose down -v --remove-orphans -t 0 >/dev/null 2>&1 || true

# ---- the images a registry would give -----------------------------------------------------
# Pulled when a registry answers; made locally (and cached) when none does.
pull() { timeout 60 podman pull -q "$1" >/dev/null 2>&1; }

t_images=$(now)
if pull docker.io/library/debian:bookworm-slim; then
    podman tag docker.io/library/debian:bookworm-slim localhost/debian:bookworm-slim
    base_key=pulled-$(podman image inspect --format '{{.Id}}' docker.io/library/debian:bookworm-slim | cut -c1-16)
else
    rootfs=$(scripts/rootfs.sh)
    base_key=$(basename "$rootfs" .tar)
    base_key=${base_key##*-}
    base_cache=localhost/mutexd-cache/debian:bookworm-$base_key
    if ! podman image exists "$base_cache"; then
        note "importing the Debian 12 root filesystem as the base image"
        podman import -q \
            --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
            --change 'CMD ["bash"]' "$rootfs" "$base_cache" >/dev/null
    fi
    podman tag "$base_cache" localhost/debian:bookworm-slim
fi
note "base image ready in $(since "$t_images") s"

# The Azurite image is built beside the compose build, which does not need it.
az_image=mcr.microsoft.com/azure-storage/azurite:latest
az_pid=""
az_cache=""
if ! pull "$az_image"; then
    scripts/azurite.sh install >/dev/null
    az_key=$(cat <(echo "$base_key") tests/compose/azurite/Dockerfile \
        tests/azurite/package.json tests/azurite/package-lock.json | sha256sum | cut -c1-16)
    az_cache=localhost/mutexd-cache/azurite:$az_key
    if ! podman image exists "$az_cache"; then
        note "building the Azurite image (Debian's nodejs, the Azurite of tests/azurite)"
        t_az=$(now)
        podman build --format docker -t "$az_cache" -f tests/compose/azurite/Dockerfile \
            tests/azurite >"$WORK/azurite-build.log" 2>&1 &
        az_pid=$!
    fi
fi

# The .NET worker's images: Microsoft's SDK and runtime images when a registry answers;
# else stand-ins made from this machine's .NET SDK, keyed by the base image, the SDK's
# version and their Dockerfiles. Without either (a plain Debian 12 has no .NET), the .NET
# worker is left out, and the run says so.
dotnet_sdk=mcr.microsoft.com/dotnet/sdk:10.0
dotnet_runtime=mcr.microsoft.com/dotnet/runtime:10.0
dotnet_caches=()
services=()
if pull "$dotnet_sdk" && pull "$dotnet_runtime"; then
    :
elif command -v dotnet >/dev/null; then
    dotnet_root=$(dirname "$(readlink -f "$(command -v dotnet)")")
    dotnet_key=$(cat <(echo "$base_key") <(dotnet --version) tests/compose/dotnet/Dockerfile.sdk \
        tests/compose/dotnet/Dockerfile.runtime | sha256sum | cut -c1-16)
    mkdir -p "$WORK/empty"
    for kind in sdk runtime; do
        cache=localhost/mutexd-cache/dotnet-$kind:$dotnet_key
        if ! podman image exists "$cache"; then
            note "making the .NET $kind image from this machine's .NET SDK"
            podman build --format docker -q -t "$cache" -v "$dotnet_root:/opt/host-dotnet:ro" \
                -f "tests/compose/dotnet/Dockerfile.$kind" "$WORK/empty" >"$WORK/dotnet-$kind.log" 2>&1 ||
                { tail -n 30 "$WORK/dotnet-$kind.log" >&2; fail "the .NET $kind image did not build"; }
        fi
        if [ $kind = sdk ]; then podman tag "$cache" "$dotnet_sdk"; else podman tag "$cache" "$dotnet_runtime"; fi
        dotnet_caches+=("$cache")
    done
else
    note "the .NET worker is left out: no registry gives Microsoft's .NET images, and this machine has no .NET SDK to make them from"
    mapfile -t services < <(docker compose config --services | grep -v -x worker-dotnet)
fi
export CONTAINERS_WORKERS_LEFT_OUT=$([ ${#services[@]} -gt 0 ] && echo worker-dotnet || true)

# ---- docs/tutorial.md, "With docker compose" ----------------------------------------------
t_build=$(now)
docker compose build "${services[@]}" >"$WORK/build.log" 2>&1 ||
    { tail -n 40 "$WORK/build.log" >&2; fail "docker compose build failed"; }
note "docker compose build: $(since "$t_build") s"

if [ -n "$az_pid" ]; then
    wait "$az_pid" || { az_pid=""; tail -n 30 "$WORK/azurite-build.log" >&2; fail "the Azurite image did not build"; }
    az_pid=""
    note "Azurite image ready $(since "$t_az") s after its build began (beside the compose build)"
fi
if [ -n "$az_cache" ]; then
    podman tag "$az_cache" "$az_image"
    # Older keys' images are of no further use.
    for old in $(podman images --format '{{.Repository}}:{{.Tag}}' | grep '^localhost/mutexd-cache/' |
        grep -v -x -e "${base_cache:-}" -e "$az_cache" "${dotnet_caches[@]/#/-e}"); do
        podman rmi "$old" >/dev/null 2>&1 || true
    done
fi

# ---- the health checks podman would schedule with systemd -----------------------------------
if [ ! -d /run/systemd/system ]; then
    (
        while :; do
            for c in $(podman ps -q --filter "label=com.docker.compose.project=$COMPOSE_PROJECT_NAME"); do
                podman healthcheck run "$c" >/dev/null 2>&1 || true
            done
            sleep 2
        done
    ) &
    health_pid=$!
fi

t_up=$(now)
docker compose up -d "${services[@]}" >"$WORK/up.log" 2>&1 ||
    { cat "$WORK/up.log" >&2; fail "docker compose up failed"; }

/usr/bin/python3 tests/compose/containers_check.py --up-started "$t_up"
