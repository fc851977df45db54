"""The install instructions of docs/clients/python.md, run as written: in a temporary
directory holding a copy of clients/python, with HOME there, without the network (in a new
network namespace when the system allows one), and the installed package imported by the
environment's python."""

from __future__ import annotations

import os
import re
import shutil
import subprocess

from mutexd_testserver import ROOT

DOC = os.path.join(ROOT, "docs", "clients", "python.md")
DEPS = os.path.join(ROOT, "scripts", "deps.sh")


def documented_commands():
    text = open(DOC).read()
    m = re.search(r"<!-- install-debian:[^>]*-->\s*```sh\n(.*?)```", text, re.S)
    assert m, "no install-debian block in docs/clients/python.md"
    return [line for line in m.group(1).splitlines() if line.strip()]


def no_network_prefix():
    """`unshare -n` when this process may make a network namespace, else nothing."""
    unshare = shutil.which("unshare")
    if unshare and subprocess.run([unshare, "-n", "true"], capture_output=True).returncode == 0:
        return unshare + " -n "
    return ""


def test_the_documented_install_works_offline(tmp_path):
    commands = documented_commands()
    apt = [c for c in commands if c.startswith("sudo apt-get install ")]
    assert len(apt) == 1, commands
    # The packages it names are installed by scripts/deps.sh for the tests.
    deps = open(DEPS).read()
    for pkg in apt[0].split()[3:]:
        assert re.search(r"\b%s\b" % re.escape(pkg), deps), "%s is not in scripts/deps.sh" % pkg
    shutil.copytree(os.path.join(ROOT, "clients", "python"), tmp_path / "clients" / "python",
                    ignore=shutil.ignore_patterns("__pycache__", "build", "*.egg-info", "tests"))
    env = {"HOME": str(tmp_path), "PATH": "/usr/bin:/bin", "LANG": "C.UTF-8",
           # Any proxy would be a way to the network.
           "http_proxy": "http://127.0.0.1:9", "https_proxy": "http://127.0.0.1:9",
           "PIP_CONFIG_FILE": os.devnull}
    prefix = no_network_prefix()
    for cmd in commands:
        if cmd in apt:
            continue
        r = subprocess.run(prefix + cmd, shell=True, cwd=tmp_path, env=env,
                           capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, "%s\n%s%s" % (cmd, r.stdout, r.stderr)
    last = r.stdout.strip()
    assert last == "<class 'mutexd._client.Client'>", last
    # The package imported is the installed one, not a copy on the way, and its version
    # comes from the installed distribution's metadata.
    r = subprocess.run([str(tmp_path / ".venvs/mutexd/bin/python"), "-c",
                        "import mutexd; print(mutexd.__file__); print(mutexd.__version__)"],
                       cwd="/", env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    where, version = r.stdout.split()
    assert "/.venvs/mutexd/lib/" in where, r.stdout
    with open(os.path.join(ROOT, "VERSION")) as f:
        assert version == f.readline().strip()
