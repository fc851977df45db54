#!/usr/bin/env bash
# The packaging stage of `make test`: what `make install` lays out, and the Debian package of
# `make deb`, installed and run on a pristine Debian 12.
#
#   1. make install PREFIX=/usr DESTDIR=<temporary folder>: the tree is exactly
#      tests/packaging/install-tree.txt (each file's type and mode, a link's target; the
#      multiarch folder written <multiarch>), no file more or less; a small C program
#      compiles and links against the installed header and library with the flags of the
#      installed mutexd.pc, and runs with that library; make uninstall DESTDIR=... then
#      leaves no file.
#   2. make deb: the package's files are exactly tests/packaging/deb-tree.txt; its control
#      fields (version from VERSION, Depends computed, the conffile); lintian passes with no
#      error or warning but those overridden, with their reasons, in
#      packaging/debian/mutexd.lintian-overrides.
#   3. tests/packaging/deb_on_debian.sh: the package on a pristine Debian 12, in a chroot and
#      under systemd in a container (root: it reruns itself with sudo).
#
#   tests/packaging/run.sh
#
# Builds in build-packaging-install/ and build-packaging-deb/ (as the user running it; only
# step 3 is root's), into a temporary folder removed at the end, passed or failed.
set -euo pipefail
cd "$(dirname "$0")/../.."
export LC_ALL=C # one sort order for the lists

INSTALL_BUILD=build-packaging-install
DEB_BUILD=build-packaging-deb
version=$(head -n1 VERSION)
multiarch=$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || gcc -print-multiarch)
work=$(mktemp -d "${TMPDIR:-/tmp}/mutexd-packaging.XXXXXX")
trap 'rm -rf "$work"' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }
note() { echo "packaging: $*" >&2; }
fail() {
    note "FAILED: $*"
    exit 1
}

# A tree's files, one a line: type and mode as ls prints them, the path, a link's target; the
# multiarch folder (x86_64-linux-gnu...) written <multiarch>.
tree() { # folder
    (cd "$1" && find . ! -type d \( -type l -printf '%M %P -> %l\n' -o -printf '%M %P\n' \) |
        sed "s|/$multiarch/|/<multiarch>/|g" | sort)
}
# The expected list (its lines but the comments) against the tree found; fails with the
# differences.
same() { # what, expected file, found file
    if ! grep -v '^#' "$2" | diff -u - "$3" >"$work/diff"; then
        sed -n '3,$p' "$work/diff" | grep '^[-+]' | sed 's/^-/    missing: /; s/^+/    extra:   /' >&2
        fail "$1 differs from $2 (above: missing, what the list has and the tree lacks; extra, the reverse)"
    fi
}

# ---- 1. make install ----------------------------------------------------------------------
t=$(now)
stage=$work/stage
note "make install PREFIX=/usr DESTDIR=$stage"
make --no-print-directory install PREFIX=/usr DESTDIR="$stage" INSTALL_BUILD=$INSTALL_BUILD \
    >"$work/install.log" 2>&1 || { cat "$work/install.log" >&2; fail "make install"; }
tree "$stage" >"$work/install-tree"
same "the tree make install lays out" tests/packaging/install-tree.txt "$work/install-tree"
note "the installed tree is tests/packaging/install-tree.txt, $(wc -l <"$work/install-tree") files"

cat >"$work/hello.c" <<'EOF'
/* Built against the installed header and library, through the installed mutexd.pc. */
#include <mutexd.h>
#include <stdio.h>

int main(void)
{
    mutexd_client *client = NULL;
    mutexd_result r = mutexd_client_new(&client, "http://127.0.0.1:1", NULL);
    if (r != MUTEXD_OK) {
        fprintf(stderr, "mutexd_client_new: %s\n", mutexd_result_name(r));
        return 1;
    }
    printf("libmutexd %s, %s\n", MUTEXD_CLIENT_VERSION_STRING, mutexd_client_url(client));
    mutexd_client_free(client);
    return 0;
}
EOF
libdir=$stage/usr/lib/$multiarch
export PKG_CONFIG_PATH=$libdir/pkgconfig
flags=$(pkg-config --cflags --libs mutexd) || fail "pkg-config --cflags --libs mutexd"
unset PKG_CONFIG_PATH
note "pkg-config --cflags --libs mutexd: $flags"
# mutexd.pc finds its prefix from its own folder (${pcfiledir}/../../..): the first -I and
# the -L, made canonical, are the installed tree's.
inc="" lib=""
for word in $flags; do
    case $word in
    -I*) [ -n "$inc" ] || inc=$(realpath -m "${word#-I}") ;;
    -L*) lib=$(realpath -m "${word#-L}") ;;
    esac
done
[ "$inc" = "$stage/usr/include" ] && [ "$lib" = "$libdir" ] ||
    fail "mutexd.pc does not point into the installed tree: -I $inc -L $lib"
# shellcheck disable=SC2086 # the flags are words
cc -std=c11 -Wall -Wextra -Werror -o "$work/hello" "$work/hello.c" $flags ||
    fail "a program does not build against the installed library"
loaded=$(LD_LIBRARY_PATH=$libdir ldd "$work/hello")
grep -qF "libmutexd.so.1 => $libdir/libmutexd.so.1 " <<<"$loaded" ||
    fail "the program does not load the installed libmutexd.so.1: $loaded"
out=$(LD_LIBRARY_PATH=$libdir "$work/hello") || fail "the program failed: $out"
[ "$out" = "libmutexd $version, http://127.0.0.1:1" ] || fail "the program printed: $out"
note "a program built with the installed mutexd.pc runs: $out"

make --no-print-directory uninstall DESTDIR="$stage" INSTALL_BUILD=$INSTALL_BUILD \
    >"$work/uninstall.log" 2>&1 || { cat "$work/uninstall.log" >&2; fail "make uninstall"; }
left=$(find "$stage" ! -type d)
[ -z "$left" ] || fail "make uninstall left: $left"
note "make uninstall removed every file; install checks passed in $(since "$t") s"

# ---- 2. make deb and lintian --------------------------------------------------------------
t=$(now)
note "make deb"
make --no-print-directory deb DEB_BUILD=$DEB_BUILD >"$work/deb.log" 2>&1 ||
    { cat "$work/deb.log" >&2; fail "make deb"; }
arch=$(dpkg --print-architecture)
deb=$DEB_BUILD/mutexd_${version}_$arch.deb
[ -f "$deb" ] || fail "make deb made no $deb: $(ls "$DEB_BUILD"/*.deb 2>/dev/null)"
dpkg-deb -c "$deb" | awk '{ $3 = $4 = $5 = ""; print }' |
    sed -E "s|^([^ ]+) ([^ ]+) +\./|\1 \2 |; s|/$multiarch/|/<multiarch>/|g" |
    grep -v '^d' | sort >"$work/deb-tree"
same "the package's files" tests/packaging/deb-tree.txt "$work/deb-tree"
field() { dpkg-deb -f "$deb" "$1"; }
[ "$(field Package)" = mutexd ] || fail "Package: $(field Package)"
[ "$(field Version)" = "$version" ] || fail "Version: $(field Version), VERSION says $version"
for dep in adduser libc6 libmicrohttpd12 libcurl4 libsqlite3-0 libcjson1; do
    grep -q "^ *$dep\( \|$\)" <<<"$(field Depends | tr ',' '\n')" ||
        fail "Depends lacks $dep: $(field Depends)"
done
for f in Maintainer Section Homepage Description; do
    [ -n "$(field "$f")" ] || fail "no $f field"
done
conffiles=$(dpkg-deb --ctrl-tarfile "$deb" | tar -xO ./conffiles)
grep -qx /etc/default/mutexd <<<"$conffiles" ||
    fail "/etc/default/mutexd is not in the package's conffiles"
note "$deb: $(du -k "$deb" | cut -f1) kB; Depends: $(field Depends)"
# Errors (E:) and warnings (W:) fail; the tags of the informational level (I:) are printed
# but do not; an overridden tag (O:) is printed with its reason (N:). (lintian's own
# --fail-on counts the overridden ones too once --show-overrides prints them.)
lintian --fail-on none -I --show-overrides "$deb" >"$work/lintian.log" 2>&1 ||
    { cat "$work/lintian.log" >&2; fail "lintian did not run"; }
grep -v '^running with root privileges' "$work/lintian.log" | sed 's/^/    /' >&2 || true
if grep -q '^[EW]: ' "$work/lintian.log"; then
    fail "lintian: errors or warnings (E:, W: above); fix them, or override one in packaging/debian/mutexd.lintian-overrides with the reason"
fi
note "lintian: no error, no warning but those overridden; deb checks passed in $(since "$t") s"

# ---- 3. on a pristine Debian 12 -----------------------------------------------------------
tests/packaging/deb_on_debian.sh "$deb"
