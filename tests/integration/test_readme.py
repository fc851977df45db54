"""The README tells the truth: its configuration table lists exactly the options of
`mutexd --help`, with the same environment variables and defaults."""

import os
import re
import subprocess

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


def readme_rows():
    text = open(os.path.join(ROOT, "README.md")).read()
    table = text.split("## Configuration", 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in table.splitlines():
        if line.startswith("| `--"):
            cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip().strip("|"))]
            rows.append(cells)
    return rows


def test_readme_configuration_matches_help():
    opts = help_options()
    rows = readme_rows()
    documented = {}
    for flags, envs, default in rows:
        names = re.findall(r"`(--[a-z-]+)", flags)
        env_names = re.findall(r"`(MUTEXD_[A-Z_]+)`", envs)
        for k, name in enumerate(names):
            documented[name] = (env_names[k] if k < len(env_names) else None, default)
    assert set(documented) == set(opts), (set(opts) ^ set(documented))
    for flag, (env, default) in opts.items():
        assert documented[flag][0] == env, (flag, documented[flag], env)
        if default and default.isdigit():
            assert default in documented[flag][1], (flag, default, documented[flag][1])
