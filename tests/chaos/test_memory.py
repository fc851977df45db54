"""A million distinct resources acquired and released: once the idle actors are
deactivated, the server's memory is back near where it started."""

import json
import os
import re
import subprocess
import time

from harness import ROOT, Server

LOADGEN = os.path.join(ROOT, "build", "loadgen")


def rss_kib(pid):
    for line in open("/proc/%d/status" % pid):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def metric(c, name):
    m = re.search(r"^%s (\d+)" % re.escape(name), c.request("GET", "/metrics").body, re.M)
    return int(m.group(1))


def run_load(s, prefix, cycles):
    out = subprocess.run([LOADGEN, "--target", "mutexd", "--port", str(s.port), "--scenario",
                          "distinct", "--fresh-keys", "--key-prefix", prefix, "--connections",
                          "64", "--warmup", "0", "--duration", "600", "--max-requests",
                          str(2 * cycles), "--json"], capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout)


def settle(s, c):
    """Waits until the idle actors are deactivated; returns the resident memory then."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and metric(c, "mutexd_actors_active") > 100:
        time.sleep(0.5)
    assert metric(c, "mutexd_actors_active") <= 100
    time.sleep(1)
    return rss_kib(s.proc.pid)


def test_a_million_resources_come_and_go():
    assert os.path.exists(LOADGEN), "build/loadgen is built by make"
    with Server() as s:
        c = s.client()
        run_load(s, "warm", 50000)
        base = settle(s, c)
        r = run_load(s, "million", 1000000)
        cycles = r.get("cycles") or r.get("results", {}).get("cycles")
        errors = r.get("errors") or {}
        after = settle(s, c)
        activated = metric(c, "mutexd_actor_activations_total")
        c.close()
    print("baseline %d KiB, after a million %d KiB; activations %d; load %s" % (
        base, after, activated, {k: r[k] for k in r if k in ("cycles", "cycles_per_s")}))
    assert activated >= 1000000
    assert after - base < 32 * 1024, (base, after)
