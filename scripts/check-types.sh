#!/usr/bin/env bash
# The clients' type declarations: the Node.js client's index.d.ts with a pinned TypeScript
# (tests/typecheck, installed from its lock file when missing or older), used as its docs
# use it; the Python package with Debian's mypy, --strict.
set -euo pipefail
cd "$(dirname "$0")/.."

dir=tests/typecheck
scripts/npm-deps.sh "$dir"
"$dir/node_modules/.bin/tsc" -p "$dir"
echo "types: clients/node/index.d.ts checked by tsc $("$dir/node_modules/.bin/tsc" --version | cut -d' ' -f2)"
(cd clients/python && mypy --strict --no-error-summary mutexd)
echo "types: clients/python/mutexd checked by mypy --strict"
