#!/usr/bin/env bash
# Checks docs/openapi.yaml: valid OpenAPI 3.1, sound schemas and examples, and in step with
# the API contract (see tests/openapi/check.mjs). Installs the check's pinned npm packages
# first when they are missing or older than the lock file. Extra arguments go to the check
# (a path to check another copy of the document). The exit status is the check's.
set -euo pipefail
cd "$(dirname "$0")/.."

dir=tests/openapi
scripts/npm-deps.sh "$dir"
exec node "$dir/check.mjs" "$@"
