#!/usr/bin/env bash
# Every document the repository names is in the repository. Checked in every tracked text
# file (and new ones not ignored):
#
#   - Markdown links, [text](path) and [text](path#anchor), resolved beside the file;
#   - bare mentions of a Markdown file or of anything under docs/ (`docs/ha.md`,
#     "python.md", ../clients.md), in Markdown, scripts and configuration, and in the
#     comments and strings of C, Python and JavaScript (not their code: `args.md` there is
#     a field). A path is looked for beside the file, then from the root; a bare file name
#     (no folder) also anywhere under docs/;
#   - the section named with it: a link's #anchor (GitHub's heading slugs), or a citation
#     `docs/architecture.md, "Blob mirror"`, whose words must begin one of the file's
#     headings.
#
# Paths made at run time (with $, <, *, {) are not paths of the repository and are skipped,
# and so are URLs, and this script and its test (tests/meta/doc_links.sh), whose paths are
# examples. Prints file:line: and what is missing for each problem; exits 1 on any.
set -euo pipefail
cd "$(dirname "$0")/.."
exec /usr/bin/python3 - "$@" <<'PY'
import io, os, re, subprocess, sys, tokenize

files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"],
                       capture_output=True, text=True, check=True).stdout.split("\0")
SKIP_DIRS = ("tests/fuzz/corpus/", "bench/results/")
SKIP_NAMES = ("package-lock.json",)
C_LIKE = (".c", ".h", ".js", ".mjs", ".cjs", ".ts")
TEXT = C_LIKE + (".py", ".md", ".sh", ".yaml", ".yml", ".toml", ".txt", ".cmake", ".json",
                 ".in", ".cfg", ".ini")
TEXT_NAMES = ("Makefile", "Dockerfile", "CMakeLists.txt", ".clang-format", ".gitignore")


def wanted(f):
    if not f or not os.path.isfile(f) or f.startswith(SKIP_DIRS) or "node_modules/" in f:
        return False
    base = os.path.basename(f)
    return base not in SKIP_NAMES and (f.endswith(TEXT) or base in TEXT_NAMES)


def blank_code(text):
    """Keeps what C-like comments and string literals hold; every other character becomes a
    space (newlines stay, so line numbers hold). Good enough for finding paths: regular
    expression literals in JavaScript are read as code."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(text[i:j]); i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(text[i:j]); i = j
        elif c in "\"'`":
            j = i + 1
            while j < n and text[j] != c and (c == "`" or text[j] != "\n"):
                j += 2 if text[j] == "\\" else 1
            out.append(text[i:j + 1]); i = j + 1
        else:
            out.append("\n" if c == "\n" else " "); i += 1
    return "".join(out)


def python_prose(text):
    """The comments and strings of a Python file, at their places."""
    lines = text.split("\n")
    keep = [[" "] * len(l) for l in lines]
    try:
        for tok in tokenize.generate_tokens(io.StringIO(text).readline):
            if tok.type not in (tokenize.COMMENT, tokenize.STRING):
                continue
            (r0, c0), (r1, c1) = tok.start, tok.end
            for r in range(r0, r1 + 1):
                a = c0 if r == r0 else 0
                b = c1 if r == r1 else len(lines[r - 1])
                keep[r - 1][a:b] = lines[r - 1][a:b]
    except (tokenize.TokenError, SyntaxError, IndentationError):
        return text
    return "\n".join("".join(k) for k in keep)


def slug(heading):
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    h = re.sub(r"`|\*\*|\[|\]\([^)]*\)", "", heading.strip()).lower()
    return re.sub(r"[^\w\- ]", "", h).replace(" ", "-")


headings_cache = {}


def headings(path):
    if path not in headings_cache:
        hs, fence = [], False
        for line in open(path, encoding="utf-8", errors="replace"):
            if line.lstrip().startswith("```"):
                fence = not fence
            elif not fence and re.match(r"#{1,6}\s", line):
                hs.append(line.lstrip("#").strip())
        headings_cache[path] = hs
    return headings_cache[path]


def has_anchor(path, anchor):
    seen = {}
    for h in headings(path):
        s = slug(h)
        k = seen.get(s, 0)
        seen[s] = k + 1
        if anchor == (s if k == 0 else "%s-%d" % (s, k)):
            return True
    return False


def has_section(path, words):
    words = re.sub(r"\s+", " ", words.strip().rstrip(".")).lower()
    for h in headings(path):
        h = h.replace("`", "").lower()
        if h == words or (h.startswith(words) and not h[len(words)].isalnum()):
            return True
    return False


# A path: segments of word characters and hyphens joined by "." or "/", never ending in
# either, maybe after ./ or ../ steps; not glued to a longer token on its left.
PATH = re.compile(r"(?<![\w$./<>{}*~@:%-])((?:\.\.?/)*[\w-]+(?:[./][\w-]+)*)(?![\w/<>{}*$])")
MDLINK = re.compile(r"\[[^\]\n]*\]\(([^)\s]+)\)")
CITED = re.compile(r"(#[\w-]+)|,\s*(?:section\s+)?\"([^\"]+)\"")

problems = []
checked = 0
# This script and its test name paths as examples, most of them missing on purpose.
EXAMPLES = ("scripts/check-doc-links.sh", "tests/meta/doc_links.sh")
DOCS = [f for f in files if f.startswith("docs/")]


def locate(src, target):
    here = os.path.dirname(src)
    tries = [os.path.join(here, target), target]
    if "/" not in target:
        tries += [d for d in DOCS if os.path.basename(d) == target]
    for t in tries:
        t = os.path.normpath(t)
        if not t.startswith("..") and os.path.exists(t):
            return t
    return None


def check(src, lineno, target, anchor=None, section=None, link=False):
    global checked
    checked += 1
    where = "%s:%d" % (src, lineno)
    if link:
        found = os.path.normpath(os.path.join(os.path.dirname(src), target)) if target else src
        if found.startswith("..") or not os.path.exists(found):
            problems.append("%s: links to %s, which is not in the repository" % (where, target))
            return
    else:
        found = locate(src, target)
        if found is None:
            problems.append("%s: names %s, which is not in the repository" % (where, target))
            return
    if found.endswith(".md") and os.path.isfile(found):
        if anchor and not has_anchor(found, anchor):
            problems.append("%s: %s has no heading for #%s" % (where, found, anchor))
        if section and not has_section(found, section):
            problems.append("%s: %s has no section \"%s\"" % (where, found, section))


for f in (f for f in files if wanted(f) and f not in EXAMPLES):
    text = open(f, encoding="utf-8", errors="replace").read()
    if f.endswith(".md"):
        for m in MDLINK.finditer(text):
            target = m.group(1)
            if re.match(r"[a-z][a-z0-9+.-]*:", target):
                continue  # a URL
            path, _, anchor = target.partition("#")
            check(f, text.count("\n", 0, m.start()) + 1, path, anchor or None, link=True)
        # Bare mentions, outside the links just checked (their text too: "[python.md](...)").
        prose = MDLINK.sub(lambda m: " " * len(m.group(0)), text)
    elif f.endswith(C_LIKE):
        prose = blank_code(text)
    elif f.endswith(".py"):
        prose = python_prose(text)
    else:
        prose = text
    for m in PATH.finditer(prose):
        p = m.group(1)
        stripped = re.sub(r"^(\.\.?/)+", "", p)
        if not (p.endswith(".md") or stripped.startswith("docs/")):
            continue
        after = CITED.match(prose, m.end())
        check(f, prose.count("\n", 0, m.start()) + 1, p,
              anchor=after.group(1)[1:] if after and after.group(1) else None,
              section=after.group(2) if after else None)

for p in problems:
    print(p, file=sys.stderr)
if problems:
    print("doc-links: %d of %d document paths named are missing or point to no section"
          % (len(problems), checked), file=sys.stderr)
    sys.exit(1)
print("doc-links: %d document paths named, every one in the repository" % checked)
PY
