#!/usr/bin/env bash
# scripts/check-doc-links.sh finds what it is for. In a scratch repository holding the
# script and a few files: every kind of reference it checks, good and bad, and the check
# must pass on the good ones and name each bad one by file and line, and nothing else.
# Leaves nothing behind.
set -euo pipefail
cd "$(dirname "$0")/../.."

WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
fail() { echo "doc-links self-test: FAILED: $*" >&2; exit 1; }

mkdir -p "$WORK/scripts" "$WORK/docs/sub" "$WORK/src"
cp scripts/check-doc-links.sh "$WORK/scripts/"
cd "$WORK"
git init -q .

cat >docs/guide.md <<'EOF'
# Guide

## Blob mirror: the journal

### Leases across a takeover

[ok](sub/page.md#install) [ok](../README.md) [ok](#guide) [url](https://example.com/x.md)
[bad](missing.md)
[bad anchor](sub/page.md#nowhere)
Bare: docs/guide.md and sub/page.md and `page.md`; $WORK/x.md and compare-<date>.md are made at run time.
Cited: docs/guide.md, "Blob mirror" and docs/guide.md#leases-across-a-takeover.
Cited badly: docs/guide.md, "Nothing of the kind".
EOF
printf '# Page\n\n## Install\n' >docs/sub/page.md
printf '# Readme\n' >README.md
cat >src/a.c <<'EOF'
/* The contract: docs/guide.md, "Blob mirror". */
static const char *p = "docs/sub/page.md";
int f(struct args *args) { return args.md; } /* code, not a path */
/* Gone: docs/OLD.md. */
EOF
cat >src/b.py <<'EOF'
"""Durability (API.md, "Names")."""
x = args.md  # code; but this comment names docs/none.md
EOF
git add -A

out=$(scripts/check-doc-links.sh 2>&1) && fail "passed on a tree with broken references: $out"
want=$(
    cat <<'EOF'
docs/guide.md:8: links to missing.md, which is not in the repository
docs/guide.md:9: docs/sub/page.md has no heading for #nowhere
docs/guide.md:12: docs/guide.md has no section "Nothing of the kind"
src/a.c:4: names docs/OLD.md, which is not in the repository
src/b.py:1: names API.md, which is not in the repository
src/b.py:2: names docs/none.md, which is not in the repository
EOF
)
got=$(grep -v '^doc-links:' <<<"$out")
[ "$got" = "$want" ] || fail "expected:
$want
got:
$got"

sed -i '/bad\|badly/d' docs/guide.md
sed -i '/Gone/d' src/a.c
rm src/b.py
out=$(scripts/check-doc-links.sh 2>&1) || fail "failed on a sound tree: $out"
echo "doc-links self-test: 6 broken references named by file and line, a sound tree passes"
