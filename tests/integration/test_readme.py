"""The README and the documents it leads to tell the truth: docs/configuration.md lists
exactly the options of `mutexd --help`, with the same environment variables and defaults,
the README's brief list names only real ones, and their commands print what they show."""

import collections
import os
import re
import shutil
import subprocess

import pytest

from harness import BIN, ROOT


def help_options():
    out = subprocess.run([BIN, "--help"], capture_output=True, text=True, check=True).stdout
    opts = {}
    lines = out.splitlines()
    for i, line in enumerate(lines):
        m = re.match(r"\s+(--[a-z-]+)(?: \S+)?\s{2,}", line)
        if not m or m.group(1) in ("--help", "--version", "--probe"):
            continue
        env = re.search(r"env (MUTEXD_[A-Z_]+)", lines[i + 1])
        default = re.search(r"default ([^,]+)", lines[i + 1])
        opts[m.group(1)] = (env.group(1) if env else None,
                            default.group(1).strip() if default else None)
    return opts


def table_rows(text):
    rows = []
    for line in text.splitlines():
        if line.startswith("| `--"):
            cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip().strip("|"))]
            rows.append(cells)
    return rows


def documented_options(rows):
    """{flag: (environment variable, default cell)} of a table's rows."""
    documented = {}
    for flags, envs, default in rows:
        names = re.findall(r"`(--[a-z-]+)", flags)
        env_names = re.findall(r"`(MUTEXD_[A-Z_]+)`", envs)
        for k, name in enumerate(names):
            documented[name] = (env_names[k] if k < len(env_names) else None, default)
    return documented


def test_configuration_table_matches_help():
    opts = help_options()
    with open(os.path.join(ROOT, "docs", "configuration.md")) as f:
        documented = documented_options(table_rows(f.read()))
    assert set(documented) == set(opts), (set(opts) ^ set(documented))
    for flag, (env, default) in opts.items():
        assert documented[flag][0] == env, (flag, documented[flag], env)
        if default and default.isdigit():
            assert default in documented[flag][1], (flag, default, documented[flag][1])


def test_readme_names_only_real_options():
    """The README's Configuration section shows a few of the options: each a real one, with
    its own environment variable and default."""
    opts = help_options()
    with open(os.path.join(ROOT, "README.md")) as f:
        brief = section(f.read(), "Configuration")
    documented = documented_options(table_rows(brief))
    assert len(documented) >= 5, documented
    assert set(documented) <= set(opts), set(documented) - set(opts)
    assert set(re.findall(r"`(--[a-z-]+)", brief)) <= set(opts)
    for flag, (env, default) in documented.items():
        assert env == opts[flag][0], (flag, env, opts[flag][0])
        if opts[flag][1] and opts[flag][1].isdigit():
            assert opts[flag][1] in default, (flag, opts[flag][1], default)


# ---- the documents' commands, run as written ------------------------------------------
#
# The README's short curl session, the tutorial's full one and its server group, and the C
# client's install and static link are run from the documents' own code blocks, in order,
# in one shell each, so that a document and what it shows cannot drift apart. Each runs in
# a network namespace of its own (unshare), where the ports the documents name (8080,
# 8081-8083, Azurite's 10000) are free whatever else runs on the machine.

TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")
UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
VARYING = re.compile(r'("expires_in_ms":|expires_in_ms: +|"lag_ms":|"lag_changes":)\d+')


def doc(path):
    with open(os.path.join(ROOT, path)) as f:
        return f.read()


def section(text, heading):
    return text.split("\n## " + heading + "\n", 1)[1].split("\n## ", 1)[0]


def blocks(text):
    """The fenced code blocks of text: (language, lines, the HTML comment right above)."""
    out = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        m = re.match(r"^```(\w*)$", lines[i])
        if m and m.group(1):
            above = lines[i - 1] if i > 0 and lines[i - 1].startswith("<!--") else ""
            j = i + 1
            while lines[j] != "```":
                j += 1
            out.append((m.group(1), lines[i + 1:j], above))
            i = j
        i += 1
    return out


def steps(text):
    """The section's commands in order: (command, expected output lines or None, how),
    how being "fg", "bg" (a command the reader runs in another terminal) or "bg-output"
    (no command: what that one printed)."""
    out = []
    for lang, lines, above in blocks(text):
        if lang == "sh":
            out.append(("\n".join(lines), None, "fg"))
        elif lang == "console" and "output of the command in the background" in above:
            out.append((None, lines, "bg-output"))
        elif lang == "console":
            for line in lines:
                if line.startswith("$ "):
                    how = "bg" if "in the background" in above else "fg"
                    out.append((line[2:], [], how))
                else:
                    out[-1][1].append(line)
    return out


def normalize(text, keep):
    """Blanks out what differs from run to run: times, lease ids not given in a command,
    the milliseconds left, a group's lags."""
    text = TIME.sub("<time>", text.replace("\r", ""))
    text = UUID.sub(lambda m: m.group(0) if m.group(0) in keep else "<uuid>", text)
    return VARYING.sub(lambda m: m.group(1) + "<n>", text)


def matches(expected, actual, keep):
    """actual against the lines a document shows: a line that starts with a space goes on
    from the one before (a long answer wrapped), `...` stands for anything within a line,
    and a line of its own `...` for any lines."""
    joined = []
    for line in expected:
        if line.startswith(" ") and joined:
            joined[-1] += line[1:]
        else:
            joined.append(line)
    pattern = ""
    for line in joined:
        line = normalize(line, keep)
        if line == "...":
            pattern += r"(?:.*\n)*?"
        else:
            pattern += ".*?".join(re.escape(part) for part in line.split("...")) + r"\n"
    return re.fullmatch(pattern, normalize(actual, keep)) is not None


def namespace():
    """The prefix that runs a command in a network namespace of its own, with loopback up."""
    for prefix in (["unshare", "-n"], ["unshare", "-rn"]):
        try:
            r = subprocess.run(prefix + ["ip", "link", "set", "lo", "up"], capture_output=True,
                               timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            continue
        if r.returncode == 0:
            return prefix
    pytest.skip("no network namespace (unshare) for the documents' fixed ports")


def run_steps(todo, cwd, env, before="", after="", timeout=180):
    """Runs the steps in one bash, in a namespace of its own, then `after` and a wait for
    every job of the shell (a step that leaves one running is a timeout); returns each
    step's output and the shell's stderr."""
    script = ["set +e", "ip link set lo up", before,
              'bgout=$(mktemp -p "$PWD" .background-output.XXXXXX)']
    for i, (cmd, _, how) in enumerate(todo):
        script.append("printf '\\n@@@ %d\\n'" % i)
        if how == "bg":
            script.append('%s >"$bgout" &\nbgpid=$!' % cmd)
        elif how == "bg-output":
            script.append('wait "$bgpid"; cat "$bgout"')
        else:
            script.append(cmd)
    script.append("printf '\\n@@@ end\\n'")
    script.append(after)
    script.append("wait")
    p = subprocess.Popen(namespace() + ["bash", "-c", "\n".join(script)], cwd=cwd, env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         start_new_session=True)
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, 9)
        out, err = p.communicate()
        pytest.fail("the steps did not end within %s s:\n%s\n%s" % (timeout, out, err))
    finally:
        try:
            os.killpg(p.pid, 9)  # what the steps left running (there should be nothing)
        except ProcessLookupError:
            pass
    parts = re.split(r"\n?@@@ (\d+|end)\n", out)
    outputs = {int(parts[k]): parts[k + 1] for k in range(1, len(parts) - 1, 2)
               if parts[k] != "end"}
    return outputs, err


def check_steps(todo, outputs, err, keep):
    for i, (cmd, expected, how) in enumerate(todo):
        if expected is None:
            continue
        got = outputs.get(i)
        assert got is not None, ("no output of", cmd, outputs, err)
        assert matches(expected, got, keep), (
            "the document shows, for %s:\n%s\n\nand it printed:\n%s\n\nstderr:\n%s"
            % (cmd or "the command in the background", "\n".join(expected), got, err[-3000:]))


def run_dir(tmp_path):
    """A folder that looks like the checkout to the documents' commands: the build-run/
    they name holds the binaries under test, the rest are the checkout's own."""
    for name in ("Makefile", "scripts", "tests", "clients", "VERSION"):
        os.symlink(os.path.join(ROOT, name), tmp_path / name)
    (tmp_path / "build-run" / "clients" / "c").mkdir(parents=True)
    os.symlink(os.path.abspath(BIN), tmp_path / "build-run" / "mutexd")
    mutexctl = os.path.abspath(os.environ.get("MUTEXCTL") or os.path.join(
        os.path.dirname(BIN), "clients", "c", "mutexctl"))
    if not os.access(mutexctl, os.X_OK):
        pytest.skip("no mutexctl beside %s" % BIN)
    os.symlink(mutexctl, tmp_path / "build-run" / "clients" / "c" / "mutexctl")
    return tmp_path


def run_curl_session(todo, tmp_path):
    # `make run` on a fresh ./data: the server under test, on the port make run uses.
    before = ('"%s" --data-dir "%s" 2>"%s" &\n'
              'for i in $(seq 100); do curl -s localhost:8080/healthz >/dev/null && break; '
              'sleep 0.1; done') % (os.path.abspath(BIN), tmp_path / "data", tmp_path / "server.log")
    outputs, err = run_steps(todo, tmp_path, dict(os.environ), before, "kill %1",
                             timeout=120)
    keep = set(UUID.findall(" ".join(cmd or "" for cmd, _, _ in todo)))
    check_steps(todo, outputs, err + (tmp_path / "server.log").read_text(), keep)


def test_tutorial_curl_session_prints_what_it_shows(tmp_path):
    text = section(doc("docs/tutorial.md"), "A session with curl")
    todo = steps(text)
    assert [how for _, _, how in todo].count("bg") == 1, todo
    assert len(todo) >= 7, todo
    run_curl_session(todo, tmp_path)


def test_readme_curl_session_prints_what_it_shows(tmp_path):
    """The README's short session: an acquire, a second one refused, the release."""
    text = section(doc("README.md"), "A session with curl")
    todo = steps(text)
    assert [how for _, _, how in todo] == ["fg"] * 3, todo
    assert all(expected for _, expected, _ in todo), todo
    run_curl_session(todo, tmp_path)


@pytest.mark.examples
def test_tutorial_server_group_prints_what_it_shows(tmp_path):
    text = section(doc("docs/tutorial.md"), "A server group (high availability)")
    todo = steps(text)
    assert todo[0][0].startswith("make azurite"), todo[0]
    cwd = run_dir(tmp_path)
    outputs, err = run_steps(todo, cwd, dict(os.environ), timeout=240)
    check_steps(todo, outputs, err, set())
    assert "level=error" not in err, err
    # The standbys set their role at every turn of their loop (ten a second): a line is
    # logged for a change only, a few at start and at the takeover.
    roles = [line for line in err.splitlines() if 'msg="http role"' in line]
    # A line with the role unchanged is for a new active's URL: once per server and URL.
    same = collections.Counter(m.group(2) for m in (
        re.search(r" role=(\S+) previous=\1 (active=\S+)", line) for line in roles) if m)
    assert all(n <= 2 for n in same.values()) and len(roles) <= 30, "\n".join(roles)
    # The two servers the section stops with SIGTERM stop cleanly (the killed one is gone).
    assert err.count('msg="stopped"') == 2, err
    # What the section leaves: data folders of the names it gives (a standby makes its own
    # only when it first tries to take over), and no Azurite.
    left = {p.name for p in tmp_path.glob("data-*")}
    assert {"data-8081", "data-azurite"} <= left <= {
        "data-8081", "data-8082", "data-8083", "data-azurite"}, left
    assert not (tmp_path / "data-azurite" / "pid").exists()


@pytest.mark.examples
def test_c_install_and_static_link_as_docs_clients_c_md_says(tmp_path, server):
    text = doc("docs/clients/c.md")
    found = {}
    for lang, lines, above in blocks(text):
        m = re.match(r"<!-- (c-install|c-link-static|c-link|example: guarded-job\.c)[: ]", above)
        if m:
            found[m.group(1)] = "\n".join(lines)
    assert set(found) == {"c-install", "c-link", "c-link-static", "example: guarded-job.c"}
    home = tmp_path / "home"
    work = tmp_path / "work"
    home.mkdir()
    work.mkdir()
    (work / "guarded-job.c").write_text(found["example: guarded-job.c"] + "\n")
    env = dict(os.environ, HOME=str(home), MUTEXD_URL="http://%s:%d" % (server.host, server.port))
    env.pop("PKG_CONFIG_PATH", None)
    env.pop("LD_LIBRARY_PATH", None)

    def sh(script, cwd, timeout=900):
        r = subprocess.run(["bash", "-ec", script], cwd=cwd, env=env, capture_output=True,
                           text=True, timeout=timeout)
        assert r.returncode == 0, (script, r.stdout[-3000:], r.stderr[-3000:])
        return r.stdout

    # The install, from the root of the checkout (into its build-run/, as make run).
    sh(found["c-install"], ROOT)
    local = home / ".local"
    for f in ("lib/libmutexd.a", "lib/libmutexd.so", "lib/pkgconfig/mutexd.pc",
              "include/mutexd.h", "bin/mutexctl", "sbin/mutexd"):
        assert (local / f).exists(), f
    # The server installed is the shipped one, without the fault seams.
    r = subprocess.run([str(local / "sbin/mutexd"), "--listen", "127.0.0.1:0", "--data-dir",
                        str(tmp_path / "d")], env=dict(env, MUTEXD_FAULT_COMMIT="1"),
                       capture_output=True, text=True, timeout=10)
    assert r.returncode != 0 and "MUTEXD_FAULT_COMMIT" in r.stderr, r

    def run_job(extra_env):
        r = subprocess.run(["./guarded-job", "jobs/readme-c"], cwd=work,
                           env=dict(env, **extra_env), capture_output=True, text=True,
                           timeout=60)
        assert r.returncode == 0 and "done" in r.stdout, r
        return r

    # The shared link, then the static one, in one shell as a reader types them.
    sh(found["c-link"] + "\n./guarded-job jobs/readme-c >shared.out\n"
       + found["c-link-static"], work)
    assert "done" in (work / "shared.out").read_text()
    ldd = subprocess.run(["ldd", str(work / "guarded-job")], capture_output=True, text=True)
    assert "libmutexd" not in ldd.stdout and "libcurl" in ldd.stdout, ldd.stdout
    run_job({})  # no LD_LIBRARY_PATH: nothing of the install is needed to run it


def test_a_build_with_fault_seams_installs_no_server(tmp_path):
    build = os.path.dirname(BIN)
    try:
        with open(os.path.join(build, "CMakeCache.txt")) as f:
            cache = f.read()
    except OSError:
        pytest.skip("%s is not a CMake build folder" % build)
    if "MUTEXD_FAULT_INJECTION:BOOL=ON" not in cache:
        pytest.skip("%s is built without the fault seams" % build)
    r = subprocess.run(["cmake", "--install", build, "--prefix", str(tmp_path)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r
    assert (tmp_path / "bin" / "mutexctl").exists()
    for server_file in ("sbin/mutexd", "bin/mutexd", "share/man/man8/mutexd.8",
                        "lib/systemd/system/mutexd.service"):
        assert not (tmp_path / server_file).exists(), (server_file, r.stdout)


def test_the_diagram_is_drawn_from_its_source():
    assert "(docs/architecture.svg)" in doc("README.md")
    svg = doc("docs/architecture.svg")
    assert svg.lstrip().startswith("<?xml") and "</svg>" in svg
    if not shutil.which("dot"):
        pytest.skip("no Graphviz dot (scripts/deps.sh docs)")
    r = subprocess.run(["dot", "-Tsvg", os.path.join(ROOT, "docs", "architecture.dot")],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout == svg, "docs/architecture.svg is out of date: run make diagram"
