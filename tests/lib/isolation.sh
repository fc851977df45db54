# Shell functions the root-only stages share (sourced, not run): a command in a chroot of
# a pristine Debian 12 inside mount and PID namespaces of its own (tests/bare/make_run.sh,
# tests/packaging/deb_on_debian.sh), and this machine's podman settings
# (tests/compose/containers.sh, tests/packaging/deb_on_debian.sh).

# chroot_start ROOT LOG COMMAND [ARG]...: in the background, COMMAND runs in the root
# filesystem ROOT as a fresh login would (an empty environment but HOME, TERM and PATH),
# with /proc, /dev and /sys mounted; its output goes to LOG. Its mounts are made in mount
# and PID namespaces of its own: nothing else sees them, and killing the namespace's first
# process kills everything started in it. The network is this machine's (apt downloads from
# the Debian archive; a server inside is reached on 127.0.0.1). Sets chroot_pid, which
# chroot_stop ends.
chroot_start() {
    local root=$1 log=$2
    shift 2
    # shellcheck disable=SC2016 # expanded by the inner shell
    unshare --mount --pid --fork --kill-child --propagation private bash -c '
        set -e
        root=$1
        shift
        mount -t proc proc "$root/proc"
        mount --rbind /dev "$root/dev"
        mount --rbind /sys "$root/sys"
        exec chroot "$root" /usr/bin/env -i HOME=/root TERM=dumb \
            PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin "$@"' \
        chroot_start "$root" "$@" >"$log" 2>&1 &
    chroot_pid=$!
}

# chroot_stop WORK: kills what chroot_start started, if it still runs, and lazily unmounts
# whatever this machine still sees under the folder WORK, deepest first (the mounts went
# with the namespace; this is for the case they did not). For a cleanup trap: never fails.
chroot_stop() {
    local work=$1 init=
    if [ -n "${chroot_pid:-}" ] && kill -0 "$chroot_pid" 2>/dev/null; then
        # The namespace's first process: when it dies the kernel kills the rest.
        read -r init _ <"/proc/$chroot_pid/task/$chroot_pid/children" 2>/dev/null || true
        [ -z "$init" ] || kill -KILL "$init" 2>/dev/null || true
        kill -KILL "$chroot_pid" 2>/dev/null || true
    fi
    [ -z "${chroot_pid:-}" ] || wait "$chroot_pid" 2>/dev/null || true
    chroot_pid=
    findmnt -rn -o TARGET | grep -F "$work/" | sort -r | while read -r m; do
        umount -l "$m" || true
    done
}

# podman_settings DIR: this run's podman settings in DIR/containers.conf, exported as
# CONTAINERS_CONF. runc and cgroupfs (no systemd is PID 1 here), logs and events in files;
# containers' limits are this shell's hard limits, at most podman's default (1048576), and
# processes at most kernel.pid_max (a higher RLIMIT_NPROC was refused here).
podman_settings() {
    local n u
    n=$(podman_limit n)
    u=$(podman_limit u)
    cat >"$1/containers.conf" <<CONF
[containers]
default_ulimits = ["nofile=$n:$n", "nproc=$u:$u"]
log_driver = "k8s-file"

[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
CONF
    export CONTAINERS_CONF=$1/containers.conf
}

podman_limit() { # n|u
    local v cap=1048576
    [ "$1" = u ] && cap=$(cat /proc/sys/kernel/pid_max)
    v=$(ulimit -H"$1")
    if [ "$v" = unlimited ] || [ "$v" -gt "$cap" ]; then v=$cap; fi
    echo "$v"
}
