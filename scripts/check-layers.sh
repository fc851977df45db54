#!/usr/bin/env bash
# The server's modules include each other in one direction only:
#
#   server -> http -> actors -> persistence -> blob -> common
#
# A module may include its own headers and those of any module to its right, never one to
# its left. Every `#include "..."` of every C file under those folders is resolved (root-
# relative, or beside the file) and checked, and must be written in the one style the tree
# uses: from the root, "module/file.h". `--graph` prints the module graph it sees.
set -euo pipefail
cd "$(dirname "$0")/.."
exec /usr/bin/python3 - "$@" <<'PY'
import os, re, subprocess, sys

ORDER = ["server", "http", "actors", "persistence", "blob", "common"]
RANK = {m: i for i, m in enumerate(ORDER)}
files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "--"] +
                       ["%s/*.[ch]" % m for m in ORDER],
                       capture_output=True, text=True, check=True).stdout.split()
include = re.compile(r'^\s*#\s*include\s+"([^"]+)"')
edges, bad = {}, []
for f in files:
    src = f.split("/")[0]
    here = os.path.dirname(f)
    for n, line in enumerate(open(f, encoding="utf-8", errors="replace"), 1):
        m = include.match(line)
        if not m:
            continue
        name = m.group(1)
        beside = os.path.normpath(os.path.join(here, name))
        target = beside if os.path.exists(beside) else os.path.normpath(name)
        dst = target.split("/")[0]
        if dst not in RANK:
            bad.append("%s:%d: includes \"%s\", which is in no module" % (f, n, name))
            continue
        if name != target:
            bad.append("%s:%d: write \"%s\" as \"%s\" (from the root)" % (f, n, name, target))
        edges[(src, dst)] = edges.get((src, dst), 0) + 1
        if RANK[dst] < RANK[src]:
            bad.append("%s:%d: %s includes \"%s\" of %s, against the direction %s" %
                       (f, n, src, name, dst, " -> ".join(ORDER)))
if "--graph" in sys.argv[1:]:
    for (s, d), c in sorted(edges.items(), key=lambda e: (RANK[e[0][0]], RANK[e[0][1]])):
        if s != d:
            print("%-12s -> %-12s %3d includes" % (s, d, c))
for b in bad:
    print(b, file=sys.stderr)
if bad:
    sys.exit(1)
print("layers: %d files, every include follows %s" % (len(files), " -> ".join(ORDER)))
PY
