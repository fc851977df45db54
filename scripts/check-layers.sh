#!/usr/bin/env bash
# The server's modules include each other in one direction only:
#
#   server -> http -> actors -> persistence -> blob -> common
#
# A module may include its own headers and those of any module to its right, never one to
# its left. Every `#include "..."` of every C file under those folders is resolved (root-
# relative, or beside the file) and checked, and must be written in the one style the tree
# uses: from the root, "module/file.h". `--graph` prints the module graph it sees.
#
# `--files DIR` checks instead the C files of one folder among themselves: a file depends
# on another when it names a function defined there that is not static (a call, or a
# pointer taken). Those dependencies must form no circle: the first one found is printed,
# each step with the names that make it, and fails the check. With `--graph` every
# dependency is printed first.
set -euo pipefail
cd "$(dirname "$0")/.."
exec /usr/bin/python3 - "$@" <<'PY'
import os, re, subprocess, sys

TOKEN = re.compile(r"""
    /\*.*?\*/ | //[^\n]* |                            # comments
    "(?:\\.|[^"\\\n])*" | '(?:\\.|[^'\\\n])*' |       # strings, characters
    ^[ \t]*\#(?:\\\n|[^\n])* |                        # preprocessor lines
    (?P<id>[A-Za-z_]\w*) | (?P<p>->|[{}();.])
""", re.X | re.S | re.M)


def scan(path):
    """The functions a C file defines that are not static, and the names its code uses
    (but members, after . or ->, and tags, after struct, union or enum)."""
    defs, used = set(), set()
    depth, decl, prev = 0, [], None
    for m in TOKEN.finditer(open(path, encoding="utf-8", errors="replace").read()):
        t = m.group("id") or m.group("p")
        if t is None:
            continue
        if depth == 0:
            # A definition: at file scope, "... name(...) {".
            if t == "{" and prev == ")" and "(" in decl:
                if "static" not in decl:
                    defs.add(decl[decl.index("(") - 1])
                decl = []
            elif t in (";", "}"):
                decl = []
            else:
                decl.append(t)
        if m.group("id") and prev not in (".", "->", "struct", "union", "enum"):
            used.add(t)
        depth += (t == "{") - (t == "}")
        prev = t
    return defs, used


def files_check(folder, graph):
    cs = sorted(subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "--",
                                "%s/*.c" % folder],
                               capture_output=True, text=True, check=True).stdout.split())
    scanned = {f: scan(f) for f in cs}
    where = {}
    for f, (defs, _) in scanned.items():
        for d in defs:
            where.setdefault(d, f)
    deps = {f: {} for f in cs}  # file -> {a file it depends on: the names}
    for f, (defs, used) in scanned.items():
        for name in sorted(used - defs):
            g = where.get(name)
            if g and g != f:
                deps[f].setdefault(g, []).append(name)
    if graph:
        for f in cs:
            for g, names in sorted(deps[f].items()):
                print("%-18s -> %-18s %s" % (f, g, " ".join(names)))
    # Depth first: a dependency on a file still on the walk's path closes a circle.
    state, path = {}, []

    def walk(f):
        state[f] = "on path"
        path.append(f)
        for g in sorted(deps[f]):
            if state.get(g) == "on path":
                return path[path.index(g):] + [g]
            if g not in state:
                circle = walk(g)
                if circle:
                    return circle
        path.pop()
        state[f] = "done"
        return None

    for f in cs:
        circle = None if f in state else walk(f)
        if circle:
            print("%s: its files depend on each other in a circle:" % folder, file=sys.stderr)
            for a, b in zip(circle, circle[1:]):
                print("  %s -> %s (%s)" % (a, b, ", ".join(deps[a][b])), file=sys.stderr)
            sys.exit(1)
    print("files of %s/: %d, %d dependencies between them, no circle" %
          (folder, len(cs), sum(len(d) for d in deps.values())))


if "--files" in sys.argv[1:]:
    at = sys.argv.index("--files") + 1
    if at >= len(sys.argv) or not os.path.isdir(sys.argv[at]):
        sys.exit("usage: scripts/check-layers.sh [--graph] [--files DIR]")
    files_check(sys.argv[at].rstrip("/"), "--graph" in sys.argv[1:])
    sys.exit(0)

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
