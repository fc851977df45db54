#!/usr/bin/env bash
# The Kubernetes manifests' pod template for real, without a cluster: `kubectl kustomize`
# renders deploy/kubernetes/azurite, kube_pods.py makes of it the pods a cluster would run
# (the StatefulSet's three, Azurite's, and four leader-election workers), `podman kube
# play` runs each on a network of this run's own, and kube_check.py checks, with the
# container stage's assertions (tests/compose/containers_check.py), that they form a group
# that survives `podman kill` of the active server's container.
#
# The images are the container stage's (tests/compose/containers.sh, the stage before this
# one in `make test`): mutexd:local, the Azurite stand-in and the four workers'. Podman is
# set up as there (tests/lib/isolation.sh: runc, cgroupfs, this shell's limits); pods need
# catatonit for their infra container. Leaves no pod, volume or network behind, even when
# it fails.
#
#   tests/deploy/kube.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
# shellcheck source=../lib/isolation.sh
. tests/lib/isolation.sh

export COMPOSE_PROJECT_NAME=mutexdkube$$
# The azurite overlay's try-it token (deploy/kubernetes/azurite/tokens), for the workers
# and the checks.
export MUTEXD_TOKEN=try-it-token-not-for-production

note() { printf 'kube: %s\n' "$*"; }
fail() { printf 'kube: FAILED: %s\n' "$*" >&2; exit 1; }

WORK=$(mktemp -d "${TMPDIR:-/tmp}/mutexd-kube.XXXXXX")
NET=$COMPOSE_PROJECT_NAME
net_made=false

cleanup() {
    local rc=$? c p v
    set +e
    local label=label=com.docker.compose.project=$COMPOSE_PROJECT_NAME
    if [ $rc -ne 0 ]; then
        for c in $(podman ps -aq --filter "$label"); do
            echo "--- logs of $(podman inspect --format '{{.Name}}' "$c")" >&2
            podman logs --tail 15 "$c" >&2 2>&1
        done
    fi
    for p in $(podman pod ls -q --filter "$label"); do
        podman pod rm -f -t 0 "$p" >/dev/null 2>&1
    done
    for v in $(podman volume ls -q | grep "^$COMPOSE_PROJECT_NAME-"); do
        podman volume rm -f "$v" >/dev/null 2>&1
    done
    $net_made && podman network rm -f "$NET" >/dev/null 2>&1
    rm -rf "$WORK"
    exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

[ "$(id -u)" -eq 0 ] || fail "needs root: it runs podman rootful (no user namespaces)"
command -v podman >/dev/null || fail "podman is not installed (scripts/deps.sh test installs it)"
command -v catatonit >/dev/null || fail "catatonit is not installed (scripts/deps.sh test installs it)"
if ! command -v kubectl >/dev/null; then
    note "SKIPPED: kubectl is not installed, and no Debian 12 package provides it: without"
    note "the kustomize rendering there are no pods to play"
    exit 0
fi
podman_settings "$WORK"

images=(docker.io/library/mutexd:local mcr.microsoft.com/azure-storage/azurite:latest
    docker.io/library/mutexdtest_worker-python:latest docker.io/library/mutexdtest_worker-node:latest
    docker.io/library/mutexdtest_worker-go:latest)
# The .NET worker, unless the container stage left it out (it says why).
if podman image exists docker.io/library/mutexdtest_worker-dotnet:latest; then
    images+=(docker.io/library/mutexdtest_worker-dotnet:latest)
else
    note "the .NET worker is left out: the container stage made no image of it"
    export CONTAINERS_WORKERS_LEFT_OUT=worker-dotnet
fi
for i in "${images[@]}"; do
    podman image exists "$i" ||
        fail "no image $i: the container stage builds it (tests/compose/containers.sh; run it first)"
done

t0=$(date +%s.%N)
kubectl kustomize deploy/kubernetes/azurite >"$WORK/rendered.yaml"
podman network create "$NET" >/dev/null
net_made=true
subnet=$(podman network inspect "$NET" --format '{{range .Subnets}}{{.Subnet}} {{end}}' | awk '{print $1}')
[[ "$subnet" =~ ^([0-9]+\.[0-9]+\.[0-9]+\.)0/24$ ]] || fail "network $NET has subnet '$subnet', not a /24"
prefix=${BASH_REMATCH[1]}

free_port() { /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
ports=()
while [ ${#ports[@]} -lt 3 ]; do
    p=$(free_port)
    [[ " ${ports[*]} " == *" $p "* ]] || ports+=("$p")
done

mkdir "$WORK/pods"
chmod 755 "$WORK"
/usr/bin/python3 tests/deploy/kube_pods.py "$WORK/rendered.yaml" "$WORK/pods" "$prefix" \
    "$COMPOSE_PROJECT_NAME" "${ports[@]}" >"$WORK/addresses"
t_play=$(date +%s.%N)
while read -r pod ip; do
    podman kube play --replace --network "$NET" --ip "$ip" "$WORK/pods/$pod.yaml" \
        >"$WORK/play-$pod.log" 2>&1 || { cat "$WORK/play-$pod.log" >&2; fail "podman kube play $pod"; }
done <"$WORK/addresses"
note "played $(wc -l <"$WORK/addresses") pods ($(cut -d' ' -f1 "$WORK/addresses" | paste -sd' ')) in $(awk -v a="$t_play" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }') s"

/usr/bin/python3 tests/deploy/kube_check.py --ports "$(IFS=,; echo "${ports[*]}")" --played "$t_play"
note "passed in $(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }') s"
