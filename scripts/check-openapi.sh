#!/usr/bin/env bash
# Checks docs/openapi.yaml: valid OpenAPI 3.1, sound schemas and examples, and in step with
# the API contract (see tests/openapi/check.mjs). Installs the check's pinned npm packages
# first when they are missing or older than the lock file. Extra arguments go to the check
# (a path to check another copy of the document). The exit status is the check's.
set -euo pipefail
cd "$(dirname "$0")/.."

dir=tests/openapi
# npm writes node_modules/.package-lock.json on every install: it dates the installed tree.
stamp=$dir/node_modules/.package-lock.json
if [ ! -f "$stamp" ] || [ "$dir/package-lock.json" -nt "$stamp" ]; then
    (cd "$dir" && npm ci --no-audit --no-fund) >&2
fi
exec node "$dir/check.mjs" "$@"
