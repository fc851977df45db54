#!/usr/bin/env bash
# The unit tests' registration follows their sources, and a test that runs no case fails.
# In a scratch copy of the tree: build one unit test, rename one of its cases, rebuild the
# way a developer would (no explicit cmake), and check that ctest knows the new name and
# not the old one, that the old name run by hand fails (it matches no case), and that a
# failing assertion in the renamed case fails the suite. Leaves nothing behind.
set -euo pipefail
cd "$(dirname "$0")/../.."

WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
fail() { echo "registration: FAILED: $*" >&2; exit 1; }

git ls-files -co --exclude-standard -z | tar --null -T - -cf - | tar -C "$WORK" -xf -
cd "$WORK"
SRC=tests/unit/common/test_json_span.c
OLD=member_values
NEW=member_values_renamed

cmake -S . -B build -DCMAKE_BUILD_TYPE=Debug >/dev/null
cmake --build build -j 2 --target test_json_span >/dev/null
list=$(ctest --test-dir build -N -R '^json_span\.')
grep -q "json_span.$OLD\$" <<<"$list" || fail "json_span.$OLD is not registered to begin with"

sed -i "s/\b$OLD\b/$NEW/g" "$SRC"
sleep 1 # a new modification time, even on a coarse clock
cmake --build build -j 2 --target test_json_span >/dev/null
list=$(ctest --test-dir build -N -R '^json_span\.')
grep -q "json_span.$NEW\$" <<<"$list" || fail "the renamed case is not registered: $list"
if grep -q "json_span.$OLD\$" <<<"$list"; then fail "the old name is still registered"; fi

if build/test_json_span "$OLD" >/dev/null 2>&1; then
    fail "a run that matches no case exited 0"
fi
ctest --test-dir build -R "^json_span\.$NEW\$" >/dev/null || fail "the renamed case did not pass"

# The renamed case runs: a failing assertion in it fails the suite.
/usr/bin/python3 - "$SRC" "$NEW" <<'PY'
import re, sys
path, name = sys.argv[1], sys.argv[2]
text = open(path).read()
text, n = re.subn(r"(static void %s\(void \*\*\w+\)\s*\{)" % name,
                  r'\1\n    fail_msg("renamed case ran");', text, count=1)
assert n == 1, "no case to make fail"
open(path, "w").write(text)
PY
cmake --build build -j 2 --target test_json_span >/dev/null 2>&1 || fail "scratch build broke"
if ctest --test-dir build -R '^json_span\.' >/dev/null 2>&1; then
    fail "a failing renamed case did not fail the suite"
fi
echo "registration: renamed case registered under its new name; a run of no case fails"
