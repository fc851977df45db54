#!/usr/bin/env bash
# Every C file git knows is formatted with the repository's .clang-format.
set -euo pipefail
cd "$(dirname "$0")/.."
mapfile -t files < <(git ls-files -co --exclude-standard '*.c' '*.h')
clang-format --dry-run --Werror "${files[@]}"
echo "format: ${#files[@]} C files formatted with .clang-format"
