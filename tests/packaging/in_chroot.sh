#!/usr/bin/env bash
# Run by deb_on_debian.sh inside a pristine Debian 12 (a chroot, no systemd running): the
# package installed with apt as an admin would, then checked; the server started as its unit
# says (unit_exec.sh), a lease acquired; then the package removed and purged, the server's
# data kept. Prints "in_chroot: passed" last when every check passed.
#
#   in_chroot.sh DEB PORT VERSION      (DEB: an absolute path in the chroot)
set -euo pipefail
deb=${1:?usage: in_chroot.sh DEB PORT VERSION}
port=${2:?}
version=${3:?}
here=$(dirname "$0")
me=in_chroot
# shellcheck source=inside.sh
. "$here/inside.sh"

step "apt-get install $deb: on a pristine system, its Depends bring what it needs"
install_package "$deb" "$version"
mutexctl --help >/dev/null || fail "mutexctl --help"
echo "ok: mutexctl runs"
cache=$(ldconfig -p)
grep -q 'libmutexd\.so\.1 ' <<<"$cache" || fail "libmutexd.so.1 is not in ldconfig's cache"
echo "ok: libmutexd.so.1 in ldconfig's cache (the trigger ran)"

step "the man pages, with man-db (minbase has none); curl for the requests below"
apt-get install -y -qq --no-install-recommends man-db curl >/tmp/install-tools.log 2>&1 ||
    { cat /tmp/install-tools.log; fail "apt-get install man-db curl"; }
expect "man -w mutexd" "$(man -w mutexd)" /usr/share/man/man8/mutexd.8.gz
expect "man -w mutexctl" "$(man -w mutexctl)" /usr/share/man/man1/mutexctl.1.gz
warnings=$(MANWIDTH=80 man --warnings=w -P cat mutexd 2>&1 >/dev/null)
[ -z "$warnings" ] || fail "man mutexd warns: $warnings"
echo "ok: man mutexd renders without a warning"

step "the mutexd user, its folder, the conffile, the unit enabled but not started"
id mutexd
entry=$(getent passwd mutexd)
uid=$(echo "$entry" | cut -d: -f3)
[ "$uid" -lt 1000 ] || fail "mutexd is not a system user: $entry"
expect "mutexd's home" "$(echo "$entry" | cut -d: -f6)" /var/lib/mutexd
expect "mutexd's shell" "$(echo "$entry" | cut -d: -f7)" /usr/sbin/nologin
expect "/var/lib/mutexd" "$(stat -c '%a %U %G' /var/lib/mutexd)" "700 mutexd mutexd"
conffiles=$(dpkg-query -W -f='${Conffiles}\n' mutexd)
grep -q '^ /etc/default/mutexd [0-9a-f]\{32\}$' <<<"$conffiles" ||
    fail "/etc/default/mutexd is not a conffile: '$conffiles'"
echo "ok: /etc/default/mutexd is a conffile"
unit=/lib/systemd/system/mutexd.service
[ -f "$unit" ] || fail "no $unit"
wanted_by=$(sed -n 's/^WantedBy=//p' "$unit")
[ -n "$wanted_by" ] || fail "the unit has no WantedBy="
for target in $wanted_by; do
    link=/etc/systemd/system/$target.wants/mutexd.service
    expect "enabled: $link" "$(readlink "$link")" "$unit"
done

step "the server as the unit starts it, on 127.0.0.1:$port"
"$here/unit_exec.sh" "$unit" "MUTEXD_LISTEN=127.0.0.1:$port" >/tmp/server.log 2>&1 &
server=$!
base=http://127.0.0.1:$port
for _ in $(seq 1 150); do
    code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 2 "$base/readyz" || true)
    [ "$code" = 200 ] && break
    kill -0 "$server" 2>/dev/null || { cat /tmp/server.log; fail "the server exited"; }
    sleep 0.2
done
[ "$code" = 200 ] || { cat /tmp/server.log; fail "/readyz answered $code within 30 s"; }
echo "ok: /readyz 200"
expect "the server's user" "$(awk '/^Uid:/ { print $2 }' "/proc/$server/status")" "$uid"
body=$(curl -sS --max-time 10 -w '\n%{http_code}' --json '{"owner":"packaging-test","ttl_ms":60000}' \
    "$base/v1/resources/packaging/acquire")
code=${body##*$'\n'}
body=${body%$'\n'*}
expect "acquire" "$code" 200
[[ $body =~ \"fencing_token\":[1-9][0-9]* ]] || fail "no fencing token in $body"
echo "ok: granted, ${BASH_REMATCH[0]}"
kill -TERM "$server"
rc=0
wait "$server" || rc=$?
expect "the server's exit status after SIGTERM" "$rc" 0
ls -l /var/lib/mutexd
data=$(find /var/lib/mutexd -type f ! -user mutexd)
[ -z "$data" ] || fail "files of /var/lib/mutexd not the mutexd user's: $data"
[ -n "$(find /var/lib/mutexd -type f -name '*.db')" ] || fail "no database in /var/lib/mutexd"

step "apt-get remove: the program goes, the settings and the data stay"
sum() { find /var/lib/mutexd -type f -exec sha256sum {} + | sort; }
before=$(sum)
apt-get remove -y -qq mutexd >/tmp/remove.log 2>&1 || { cat /tmp/remove.log; fail "apt-get remove"; }
[ ! -e /usr/sbin/mutexd ] || fail "/usr/sbin/mutexd is still there"
expect "dpkg status" "$(dpkg-query -W -f='${Status}' mutexd)" "deinstall ok config-files"
[ -f /etc/default/mutexd ] || fail "remove deleted the conffile /etc/default/mutexd"
expect "/var/lib/mutexd after remove" "$(stat -c '%a %U' /var/lib/mutexd)" "700 mutexd"
[ "$(sum)" = "$before" ] || fail "the data in /var/lib/mutexd changed on remove"
echo "ok: the data is as it was"

step "apt-get purge: the settings go, the data and the user stay (the fencing tokens)"
apt-get purge -y -qq mutexd >/tmp/purge.log 2>&1 || { cat /tmp/purge.log; fail "apt-get purge"; }
[ ! -e /etc/default/mutexd ] || fail "purge left /etc/default/mutexd"
[ "$(sum)" = "$before" ] || fail "purge changed the data in /var/lib/mutexd"
id mutexd >/dev/null || fail "purge removed the mutexd user"
echo "ok: /etc/default/mutexd gone; /var/lib/mutexd and the user kept"
for target in $wanted_by; do
    [ ! -e "/etc/systemd/system/$target.wants/mutexd.service" ] || fail "purge left the unit enabled"
done
[ ! -e /etc/systemd/system/mutexd.service ] || fail "purge left the unit masked"
echo "ok: the unit neither enabled nor masked"

echo "in_chroot: passed"
