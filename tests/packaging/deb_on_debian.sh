#!/usr/bin/env bash
# The .deb on a pristine Debian 12, twice:
#
#   1. in a chroot of the root filesystem of scripts/rootfs.sh (debootstrap, minbase), in its
#      own mount and PID namespaces as tests/bare/make_run.sh does: apt-get install of the
#      package, its files, user, folder and conffile, the server started as the unit's
#      ExecStart= says, as its user, with its environment file, a lease granted, then remove
#      and purge (in_chroot.sh);
#   2. in a podman container of the same root filesystem plus systemd, systemd its PID 1:
#      the unit started, reloaded and stopped by systemctl, a lease granted, remove of a
#      running server (in_systemd.sh). The image is cached in podman's store under
#      localhost/mutexd-cache/systemd:<key>, the key a hash of the root filesystem's and of
#      what is added to it, so only the first run builds it (about 20 s).
#
#   tests/packaging/deb_on_debian.sh DEB
#
# Needs root (chroot, mounts, rootful podman): reruns itself with sudo. apt downloads the
# package's dependencies from the Debian archive. Nothing is left behind, passed or failed:
# no mount, no process, no container, no temporary folder. Environment:
# MUTEXD_PACKAGING_TIMEOUT, seconds each of the two may take (600).
set -euo pipefail
cd "$(dirname "$0")/../.."
# shellcheck source=../lib/isolation.sh
. tests/lib/isolation.sh

deb=${1:?usage: tests/packaging/deb_on_debian.sh DEB}
deb=$(realpath "$deb")
if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null || { echo "deb_on_debian: needs root (chroot, podman)" >&2; exit 1; }
    exec sudo --preserve-env=MUTEXD_CACHE,MUTEXD_PACKAGING_TIMEOUT "$PWD/tests/packaging/deb_on_debian.sh" "$deb"
fi
TIMEOUT=${MUTEXD_PACKAGING_TIMEOUT:-600}
version=$(head -n1 VERSION)
tarball=$(scripts/rootfs.sh)
work=$(mktemp -d "${TMPDIR:-/tmp}/mutexd-deb.XXXXXX")
root=$work/root
container=

cleanup() {
    local rc=$?
    set +e # every step runs, whatever the one before it did
    chroot_stop "$work"
    [ -z "$container" ] || podman rm -f -t 0 "$container" >/dev/null 2>&1
    rm -rf --one-file-system "$work"
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }
note() { echo "deb_on_debian: $*" >&2; }
fail() {
    note "FAILED: $*"
    exit 1
}

# ---- 1. the chroot ------------------------------------------------------------------------
t=$(now)
mkdir "$root"
tar -C "$root" --numeric-owner -xpf "$tarball"
# A root filesystem that leaves out documentation (as Docker's debian:*-slim images do, with
# path-exclude lines in /etc/dpkg/dpkg.cfg.d) would install no man page: none may be there.
if grep -rlsE '^path-exclude.*/usr/share/man' "$root/etc/dpkg/dpkg.cfg.d"; then
    fail "the root filesystem's dpkg excludes man pages (above); the test needs them installed"
fi
mkdir "$root/tmp/packaging"
cp "$deb" tests/packaging/in_chroot.sh tests/packaging/inside.sh tests/packaging/unit_exec.sh \
    "$root/tmp/packaging/"
cp -L /etc/resolv.conf "$root/etc/resolv.conf"
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')

note "the package in a chroot of a pristine Debian 12 (no systemd running)"
chroot_start "$root" "$work/chroot.log" /bin/bash /tmp/packaging/in_chroot.sh \
    "/tmp/packaging/$(basename "$deb")" "$port" "$version"
deadline=$((SECONDS + TIMEOUT))
while kill -0 "$chroot_pid" 2>/dev/null && [ $SECONDS -lt $deadline ]; do sleep 0.5; done
kill -0 "$chroot_pid" 2>/dev/null && { tail -n 30 "$work/chroot.log" >&2; fail "the chroot's checks took over $TIMEOUT s"; }
rc=0
wait "$chroot_pid" || rc=$?
chroot_pid=
sed 's/^/    /' "$work/chroot.log" >&2
[ "$rc" -eq 0 ] && [ "$(tail -n1 "$work/chroot.log")" = "in_chroot: passed" ] ||
    fail "the chroot's checks (exit status $rc)"
note "chroot: passed in $(since "$t") s"
mounts=$(findmnt -rn -o TARGET)
! grep -qF "$work/" <<<"$mounts" || fail "mounts left under $work"
rm -rf --one-file-system "$root"

# ---- 2. systemd in a container -------------------------------------------------------------
t=$(now)
podman_settings "$work" # tests/lib/isolation.sh

rootfs_key=$(basename "$tarball" .tar)
rootfs_key=${rootfs_key##*-}
base=localhost/mutexd-cache/debian:bookworm-$rootfs_key
if ! podman image exists "$base"; then
    note "importing the Debian 12 root filesystem as an image"
    podman import -q \
        --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
        --change 'CMD ["bash"]' "$tarball" "$base" >/dev/null
fi
cat >"$work/Containerfile" <<EOF
FROM $base
RUN apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \\
    --no-install-recommends systemd systemd-sysv curl >/dev/null
CMD ["/sbin/init"]
EOF
image=localhost/mutexd-cache/systemd:$(sha256sum "$work/Containerfile" | cut -c1-16)
if ! podman image exists "$image"; then
    note "building $image: the root filesystem plus systemd and curl"
    podman build --format docker -t "$image" -f "$work/Containerfile" "$work" \
        >"$work/build.log" 2>&1 || { cat "$work/build.log" >&2; fail "podman build"; }
fi

mkdir "$work/mnt"
cp "$deb" tests/packaging/in_systemd.sh tests/packaging/inside.sh "$work/mnt/"
container=mutexd-packaging-$$
podman run -d --name "$container" --systemd=always -v "$work/mnt:/mnt/packaging:ro" \
    "$image" /sbin/init >/dev/null || fail "podman run of systemd"
state=
for _ in $(seq 1 120); do
    state=$(podman exec "$container" systemctl is-system-running 2>/dev/null || true)
    case $state in running | degraded) break ;; esac
    sleep 0.5
done
case $state in
running | degraded) note "systemd is up in the container ($state)" ;;
*)
    podman logs "$container" 2>&1 | tail -n 20 >&2
    fail "systemd did not come up in the container within 60 s (state: '$state')"
    ;;
esac
rc=0
timeout "$TIMEOUT" podman exec "$container" /bin/bash /mnt/packaging/in_systemd.sh \
    "/mnt/packaging/$(basename "$deb")" "$version" >"$work/systemd.log" 2>&1 || rc=$?
sed 's/^/    /' "$work/systemd.log" >&2
[ "$rc" -eq 0 ] && [ "$(tail -n1 "$work/systemd.log")" = "in_systemd: passed" ] ||
    fail "the checks under systemd (exit status $rc)"
note "systemd: passed in $(since "$t") s"
