#!/usr/bin/env bash
# Run by deb_on_debian.sh inside a Debian 12 container whose PID 1 is systemd: the package
# installed with apt, then its unit run by systemd for real: enabled but not started by the
# install; `systemctl start` returns once the server is up (for a Type=notify unit, once it
# sent READY=1), a lease is granted, `systemctl reload` keeps the same process, `systemctl
# stop` ends it with status 0; an upgrade restarts a running server; `apt-get remove` of a
# running server stops it and keeps its data. Prints "in_systemd: passed" last when every
# check passed.
#
#   in_systemd.sh DEB VERSION
set -euo pipefail
deb=${1:?usage: in_systemd.sh DEB VERSION}
version=${2:?}
export SYSTEMD_PAGER=
me=in_systemd
on_fail() { journalctl -u mutexd --no-pager -n 30 >&2 || true; }
# shellcheck source=inside.sh
. "$(dirname "$0")/inside.sh"
prop() { systemctl show -P "$1" mutexd; }

step "apt-get install $deb"
install_package "$deb" "$version"
expect "enabled by the install" "$(systemctl is-enabled mutexd || true)" enabled
expect "not started by the install" "$(systemctl is-active mutexd || true)" inactive

step "systemctl start mutexd (unit type: $(prop Type))"
timeout 90 systemctl start mutexd || fail "systemctl start"
expect "is-active" "$(systemctl is-active mutexd || true)" active
pid=$(prop MainPID)
[ "$pid" -gt 0 ] || fail "no main process"

# Where it listens: --listen on its command line, else MUTEXD_LISTEN of the environment file
# or of the unit's Environment= (its environ is not readable here), else the default; a
# wildcard address is reached on loopback.
listen=$(tr '\0' '\n' <"/proc/$pid/cmdline" | sed -n '/^--listen$/{n;p;q}; s/^--listen=//p')
[ -n "$listen" ] || listen=$({ prop Environment | tr ' ' '\n'; cat /etc/default/mutexd; } |
    sed -n 's/^MUTEXD_LISTEN=["'"'"']\{0,1\}\([^"'"'"']*\).*/\1/p' | tail -n1)
listen=${listen:-127.0.0.1:8080}
port=${listen##*:}
base=http://127.0.0.1:$port
case ${listen%:*} in 127.* | localhost | 0.0.0.0 | '[::]' | '[::1]' | '') ;; *) base=http://$listen ;; esac
echo "listening on $listen: $base"
# A Type=notify unit is started once the server said READY=1: it answers at once. Of a
# Type=simple one, systemctl start only saw the fork: wait for it (and only then is the main
# process the server rather than systemd's child setting the sandbox up).
readyz() { curl -s -o /dev/null -w '%{http_code}' --max-time 5 "$base/readyz" || true; }
if [ "$(prop Type)" = notify ]; then
    expect "/readyz right after systemctl start" "$(readyz)" 200
else
    for _ in $(seq 1 150); do
        code=$(readyz)
        [ "$code" = 200 ] && break
        sleep 0.2
    done
    expect "/readyz within 30 s of systemctl start" "$code" 200
fi
expect "the main process, still" "$(prop MainPID)" "$pid"
# (Its status, not the owner of /proc/PID: a process that is not dumpable shows root's.)
expect "the server's user" "$(awk '/^Uid:/ { print $2 }' "/proc/$pid/status")" "$(id -u mutexd)"
echo "StatusText: $(prop StatusText)"
expect "/var/lib/mutexd once systemd ran the unit" "$(stat -c '%a %U %G' /var/lib/mutexd)" \
    "700 mutexd mutexd"
body=$(curl -sS --max-time 10 -w '\n%{http_code}' --json '{"owner":"systemd-test","ttl_ms":60000}' \
    "$base/v1/resources/packaging/acquire")
code=${body##*$'\n'}
body=${body%$'\n'*}
expect "acquire" "$code" 200
[[ $body =~ \"fencing_token\":[1-9][0-9]* ]] || fail "no fencing token in $body"
echo "ok: granted, ${BASH_REMATCH[0]}"

step "systemctl reload mutexd"
timeout 60 systemctl reload mutexd || fail "systemctl reload"
sleep 0.5
expect "is-active after reload" "$(systemctl is-active mutexd || true)" active
expect "the same process after reload" "$(prop MainPID)" "$pid"
code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 5 "$base/readyz" || true)
expect "/readyz after reload" "$code" 200
echo "the journal:"
journalctl -u mutexd --no-pager -n 8 -o cat

step "systemctl stop mutexd"
timeout 60 systemctl stop mutexd || fail "systemctl stop"
expect "is-active after stop" "$(systemctl is-active mutexd || true)" inactive
expect "the result" "$(prop Result)" success
expect "the server's exit status" "$(prop ExecMainStatus)" 0

step "an upgrade (apt-get install --reinstall) restarts a running server"
timeout 90 systemctl start mutexd || fail "systemctl start, again"
pid=$(prop MainPID)
apt-get install -y -qq --reinstall "$deb" >/tmp/reinstall.log 2>&1 ||
    { cat /tmp/reinstall.log; fail "apt-get install --reinstall"; }
expect "is-active after the upgrade" "$(systemctl is-active mutexd || true)" active
[ "$(prop MainPID)" != "$pid" ] || fail "the server was not restarted (main process $pid)"
echo "ok: restarted, main process $pid, now $(prop MainPID)"
expect "still enabled" "$(systemctl is-enabled mutexd || true)" enabled

step "apt-get remove of a running server: prerm stops it, the data stays"
before=$(find /var/lib/mutexd -type f -name '*.db' | sort)
[ -n "$before" ] || fail "no database in /var/lib/mutexd"
apt-get remove -y -qq mutexd >/tmp/remove.log 2>&1 || { cat /tmp/remove.log; fail "apt-get remove"; }
expect "is-active after remove" "$(systemctl is-active mutexd || true)" inactive
uid=$(id -u mutexd)
for p in /proc/[0-9]*; do
    [ "$(awk '/^Uid:/ { print $2 }' "$p/status" 2>/dev/null || true)" != "$uid" ] ||
        fail "a process of mutexd is left: $p"
done
expect "the data after remove" "$(find /var/lib/mutexd -type f -name '*.db' | sort)" "$before"

echo "in_systemd: passed"
