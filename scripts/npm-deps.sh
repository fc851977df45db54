#!/usr/bin/env bash
# Installs the pinned npm packages of a folder with a package-lock.json (npm ci) when they
# are missing or older than the lock file; otherwise does nothing.
#
#   scripts/npm-deps.sh DIR
set -euo pipefail
dir=$1
# npm writes node_modules/.package-lock.json on every install: it dates the installed tree.
stamp=$dir/node_modules/.package-lock.json
if [ ! -f "$stamp" ] || [ "$dir/package-lock.json" -nt "$stamp" ]; then
    (cd "$dir" && npm ci --no-audit --no-fund) >&2
fi
