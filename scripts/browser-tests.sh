#!/usr/bin/env bash
# The dashboard's tests in a real browser (tests/browser): Debian's Chromium, headless,
# driven by playwright-core, against real servers of MUTEXD_BIN (default build/mutexd) that
# the tests start and stop. Installs the pinned npm packages first when they are missing or
# older than the lock file; no browser is ever downloaded (playwright-core brings none, and
# PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD says so to whatever would). Extra arguments go to
# `node --test` (a --test-name-pattern, or test files instead of the whole folder).
#
#   scripts/browser-tests.sh                       every browser test
#   scripts/browser-tests.sh tests/browser/auth.test.mjs
set -euo pipefail
cd "$(dirname "$0")/.."

export PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1
dir=tests/browser
scripts/npm-deps.sh "$dir"
[ -x /usr/bin/chromium ] || [ -n "${CHROMIUM:-}" ] ||
    { echo "browser-tests.sh: no /usr/bin/chromium (scripts/deps.sh check installs it)" >&2; exit 1; }
export MUTEXD_BIN=${MUTEXD_BIN:-build/mutexd}
[ -x "$MUTEXD_BIN" ] || { echo "browser-tests.sh: no $MUTEXD_BIN: run make build first" >&2; exit 1; }
if [ $# -eq 0 ]; then
    set -- "$dir/"
fi
exec node --test "$@"
