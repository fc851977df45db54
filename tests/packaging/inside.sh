# Sourced by in_chroot.sh and in_systemd.sh, inside the pristine Debian 12 where each runs
# (deb_on_debian.sh copies it there beside them): their steps, checks and failure, and the
# install of the package both begin with. The sourcing script sets `me` (its name in the
# messages) and may define on_fail, run before a failure exits.
export DEBIAN_FRONTEND=noninteractive

step() { printf '\n---- %s\n' "$*"; }
fail() {
    echo "$me: FAILED: $*" >&2
    if declare -F on_fail >/dev/null; then on_fail; fi
    exit 1
}
expect() { # what, got, wanted
    [ "$2" = "$3" ] || fail "$1: got '$2', wanted '$3'"
    echo "ok: $1: $2"
}

# install_package DEB VERSION: apt-get install of the package (its Depends from the
# archive), then the server's version and features: the package's server notifies systemd
# and has no fault seams.
install_package() {
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "$1" >/tmp/install.log 2>&1 ||
        { cat /tmp/install.log; fail "apt-get install of the package"; }
    expect "mutexd --version" "$(mutexd --version)" "mutexd $2
features: +systemd -fault-injection"
}
