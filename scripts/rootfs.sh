#!/usr/bin/env bash
# A pristine Debian 12 (bookworm) root filesystem made with debootstrap from the Debian
# archive this machine's apt already uses, kept as a tarball in a cache outside the
# clone and reused while what it is built from stays the same.
#
#   scripts/rootfs.sh        prints the tarball's path, building it first if needed
#
# Used by the bare-machine stage (a copy of the repository runs `make run` in it) and by
# the container stage (it becomes the base image when no image registry is reachable).
# The cache key is everything the tarball is made of: suite, variant, archive, the
# debootstrap version and the extra sources lines below. Cache folder: $MUTEXD_CACHE,
# default ~/.cache/mutexd. Each user copies the tarball out; nobody changes it.
set -euo pipefail
cd "$(dirname "$0")/.."

SUITE=bookworm
VARIANT=minbase
CACHE=${MUTEXD_CACHE:-$HOME/.cache/mutexd}

# The archive apt uses here: the first Debian URI of its sources (deb822 or one-line).
archive() {
    local u
    u=$(grep -hsE '^URIs:' /etc/apt/sources.list.d/*.sources 2>/dev/null |
        awk '{print $2}' | grep -v -- '-security' | head -n1 || true)
    if [ -z "$u" ]; then
        u=$(grep -hsE '^deb ' /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null |
            awk '{print $2}' | grep -v -- '-security' | head -n1 || true)
    fi
    [ -n "$u" ] || { echo "rootfs: no Debian archive found in apt's sources" >&2; exit 1; }
    echo "${u%/}"
}

ARCHIVE=$(archive)
SECURITY=${ARCHIVE%/debian}/debian-security
if ! command -v debootstrap >/dev/null; then
    echo "rootfs: installing debootstrap" >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        debootstrap >/dev/null 2>&1 || {
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
            --no-install-recommends debootstrap >/dev/null; }
fi
DBVER=$(dpkg-query -W -f='${Version}' debootstrap)
SOURCES="deb $ARCHIVE $SUITE main
deb $ARCHIVE $SUITE-updates main
deb $SECURITY $SUITE-security main"
KEY=$(printf '%s\n' "$SUITE" "$VARIANT" "$ARCHIVE" "$DBVER" "$SOURCES" | sha256sum | cut -c1-16)
OUT=$CACHE/rootfs-$SUITE-$VARIANT-$KEY.tar

if [ -s "$OUT" ]; then
    echo "$OUT"
    exit 0
fi

mkdir -p "$CACHE"
# One builder at a time; a second caller waits and then finds the tarball.
exec 9>"$OUT.lock"
flock 9
if [ ! -s "$OUT" ]; then
    tmp=$(mktemp -d "$CACHE/rootfs.XXXXXX")
    trap 'rm -rf "$tmp"' EXIT
    echo "rootfs: debootstrap $SUITE ($VARIANT), a few minutes the first time" >&2
    debootstrap --variant="$VARIANT" "$SUITE" "$tmp/root" "$ARCHIVE" >"$tmp/log" 2>&1 || {
        tail -n 30 "$tmp/log" >&2
        exit 1
    }
    printf '%s\n' "$SOURCES" >"$tmp/root/etc/apt/sources.list"
    rm -rf "$tmp/root/var/cache/apt/archives/"*.deb "$tmp/root/var/lib/apt/lists/"*
    tar --numeric-owner -C "$tmp/root" -cf "$tmp/rootfs.tar" .
    mv "$tmp/rootfs.tar" "$OUT"
fi
echo "$OUT"
