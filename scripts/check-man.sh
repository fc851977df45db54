#!/usr/bin/env bash
# The man pages (packaging/man) and the environment file (packaging/default/mutexd) say
# what the programs do, both ways:
#
#   - mutexd.8: every option of `mutexd --help` is an item of OPTIONS, and every item there
#     is an option; every environment variable of --help is an item of ENVIRONMENT, and
#     every item there is one (or one that systemd sets: NOTIFY_SOCKET, WATCHDOG_*);
#   - mutexctl.1: the commands of `mutexctl --help` are the subsections of COMMANDS, the
#     options of every command are the options of `mutexctl COMMAND --help` (its own, as
#     items of its subsection) and of the main help (OPTIONS); the environment variables
#     named in any of those helps are the items of ENVIRONMENT;
#   - packaging/default/mutexd lists every MUTEXD_* variable of `mutexd --help` (set or
#     commented out) and no other, and with every line that has a value uncommented (but
#     the files, which need not exist here) mutexd accepts them all (`--probe` parses every
#     option before it asks a server: exit 2 is a refused value);
#   - each page formats without a warning (groff -ww, and man --warnings as lintian runs
#     it), and its .TH names the version in VERSION.
#
#   scripts/check-man.sh     (MUTEXD_BIN and MUTEXCTL_BIN choose the programs; default:
#                             build/mutexd and build/clients/c/mutexctl)
set -euo pipefail
cd "$(dirname "$0")/.."
export MUTEXD_BIN=${MUTEXD_BIN:-build/mutexd}
export MUTEXCTL_BIN=${MUTEXCTL_BIN:-build/clients/c/mutexctl}
export MAN_DIR=${MAN_DIR:-packaging/man}
export ENV_FILE=${ENV_FILE:-packaging/default/mutexd}
for b in "$MUTEXD_BIN" "$MUTEXCTL_BIN"; do
    [ -x "$b" ] || { echo "check-man: $b is not built (make build)" >&2; exit 1; }
done
exec /usr/bin/python3 - "$@" <<'PY'
import os, re, subprocess, sys, tempfile

MAN_DIR, ENV_FILE = os.environ["MAN_DIR"], os.environ["ENV_FILE"]
MUTEXD, MUTEXCTL = os.environ["MUTEXD_BIN"], os.environ["MUTEXCTL_BIN"]
bad = []


def run(*args):
    return subprocess.run(list(args), capture_output=True, text=True, check=True).stdout


def sections(path):
    """{(SH, SS): [tag lines of .TP items]} of a man page, and its .TH line."""
    items, sh, ss, th = {}, None, None, None
    lines = open(path, encoding="utf-8").read().splitlines()
    for i, line in enumerate(lines):
        if line.startswith(".TH "):
            th = line
        elif line.startswith(".SH "):
            sh, ss = line[4:].strip().strip('"'), None
        elif line.startswith(".SS "):
            # A command's subsection: its first word ("token hash TOKEN" is token's).
            ss = re.sub(r"\\f.", "", line[4:]).strip().strip('"').split()[0].rstrip(",")
        elif line == ".TP" and i + 1 < len(lines):
            items.setdefault((sh, ss), []).append(lines[i + 1])
        items.setdefault((sh, ss), [])
    return items, th


def flags(tags):
    return {m for t in tags for m in re.findall(r"--[a-z][a-z-]*", t.replace("\\-", "-"))}


def names(tags):
    return {m for t in tags for m in re.findall(r"\b([A-Z][A-Z0-9]*_[A-Z0-9_]+)\b", t)}


def compare(what, from_help, from_doc, doc="the man page"):
    for x in sorted(from_help - from_doc):
        bad.append("%s: %s is in --help but not in %s" % (what, x, doc))
    for x in sorted(from_doc - from_help):
        bad.append("%s: %s is in %s but not in --help" % (what, x, doc))


version = open("VERSION").read().strip()

# ---- mutexd.8 ------------------------------------------------------------------------------
page = os.path.join(MAN_DIR, "mutexd.8")
help_text = run(MUTEXD, "--help")
help_flags = set(re.findall(r"^  (--[a-z][a-z-]*)", help_text, re.M))
help_env = set(re.findall(r"\b(MUTEXD_[A-Z_]+|AZURE_STORAGE_CONNECTION_STRING)\b", help_text))
items, th = sections(page)
compare("mutexd.8 OPTIONS", help_flags, flags(items.get(("OPTIONS", None), [])))
SYSTEMD_SETS = {"NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID"}
compare("mutexd.8 ENVIRONMENT", help_env,
        names(items.get(("ENVIRONMENT", None), [])) - SYSTEMD_SETS)
if not th or ('"mutexd %s"' % version) not in th:
    bad.append("mutexd.8: .TH does not name mutexd %s: %s" % (version, th))

# ---- mutexctl.1 ----------------------------------------------------------------------------
page = os.path.join(MAN_DIR, "mutexctl.1")
main_help = run(MUTEXCTL, "--help")
block = main_help.split("Commands:", 1)[1].split("Options of every command", 1)
commands = set(re.findall(r"^  ([a-z]+)\b", block[0], re.M))
global_block = block[1].split("\n\n", 1)[0]
global_flags = set(re.findall(r"(--[a-z][a-z-]*)", global_block))
items, th = sections(page)
compare("mutexctl.1 COMMANDS", commands,
        {ss for (sh, ss) in items if sh == "COMMANDS" and ss})
compare("mutexctl.1 OPTIONS", global_flags, flags(items.get(("OPTIONS", None), [])))
ctl_env = set(re.findall(r"\b(MUTEXD_[A-Z_]+)\b", main_help))
for c in sorted(commands):
    text = run(MUTEXCTL, c, "--help")
    ctl_env |= set(re.findall(r"\b(MUTEXD_[A-Z_]+)\b", text))
    compare("mutexctl.1 %s" % c, set(re.findall(r"^  (--[a-z][a-z-]*)", text, re.M)),
            flags(items.get(("COMMANDS", c), [])))
compare("mutexctl.1 ENVIRONMENT", ctl_env, names(items.get(("ENVIRONMENT", None), [])))
if not th or ('"mutexd %s"' % version) not in th:
    bad.append("mutexctl.1: .TH does not name mutexd %s: %s" % (version, th))

# ---- the environment file ------------------------------------------------------------------
env_lines = open(ENV_FILE, encoding="utf-8").read().splitlines()
assign = re.compile(r"^#?([A-Z][A-Z0-9_]*)=(.*)$")
listed = {m.group(1) for m in map(assign.match, env_lines) if m}
compare(ENV_FILE, help_env, listed, "the file")
env = {k: v for k, v in os.environ.items() if not k.startswith("MUTEXD_")}
env.pop("AZURE_STORAGE_CONNECTION_STRING", None)
for line in env_lines:
    m = assign.match(line)
    if m and m.group(2) and not m.group(1).endswith(("_FILE", "_CERT", "_KEY")):
        env[m.group(1)] = m.group(2).strip('"')
with tempfile.TemporaryDirectory() as d:
    env["MUTEXD_DATA_DIR"] = os.path.join(d, "data")
    r = subprocess.run([MUTEXD, "--probe"], env=env, capture_output=True, text=True,
                       timeout=30)
    if r.returncode == 2:
        bad.append("%s: mutexd refuses its values: %s" % (ENV_FILE, r.stderr.strip()))

# ---- formatting ----------------------------------------------------------------------------
for page in sorted(os.listdir(MAN_DIR)):
    path = os.path.join(MAN_DIR, page)
    e = dict(os.environ, LC_ALL="C.UTF-8", MANROFFSEQ="", MANWIDTH="80")
    for cmd in (["groff", "-ww", "-z", "-man", path],
                ["man", "--warnings", "-E", "UTF-8", "-l", "-Tutf8", "-Z", path]):
        r = subprocess.run(cmd, env=e, capture_output=True, text=True)
        if r.returncode != 0 or r.stderr.strip():
            bad.append("%s: %s: %s" % (path, cmd[0], r.stderr.strip() or "exit %d" % r.returncode))

for b in bad:
    print("check-man: " + b, file=sys.stderr)
if bad:
    sys.exit(1)
print("man: mutexd.8 and mutexctl.1 name every option, command and variable of --help; "
      "%s lists every variable; no formatting warning" % ENV_FILE)
PY
