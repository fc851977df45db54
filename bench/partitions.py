#!/usr/bin/env python3
"""What partitions buy and what a failure costs: a partitioned group against one server.

    bench/partitions.py [--only scale,small,failure,takeover] [--cpu 0.25] [--seconds 10]
                        [--reps 2] [--leases 300000] [--connections 64] [--json FILE]

- scale: acquire + release cycles per second (bench/loadgen, distinct keys, --connections
  connections) of one server with --ha, of three servers with --partitions 1 (one active,
  two standbys) and of three with --partitions 16, each server held to the same CPU share
  (--cpu cores, a cgroup's CPU quota of its own: the CFS bandwidth limit that podman --cpus
  sets), loadgen sending each request straight to its partition's owner. The goal: three
  servers of 16 partitions at >= 2.2x one server.
- small: one server with --ha, --partitions 16 against --partitions 1, no CPU limit, as many
  connections (the goal: >= 0.9x).
- failure: three servers of 16 partitions; 96 resources (6 a partition), each renewed every
  100 ms by a client of its own at its partition's owner; one server is SIGKILLed. The share
  of resources that saw no answer for more than a second, against the killed server's share
  of the partitions, and the p99 renew latency of the others' partitions before and after.
- takeover: two servers, --leases held leases (TTL 1 h) filled through loadgen; the owner
  of partition 0 is SIGKILLed, and the survivor's takeover of each partition it takes is
  timed (its log's took_ms: the read of snapshot and journal to serving), as is the kill to
  the first 200 on a resource of that partition. With --partitions 1 that is today's whole
  container; with --partitions 16, one partition of 16.

Each run uses a fresh container on one Azurite, on loopback; the figures of each rep, the
machine and the commit are printed and written to --json. Needs write access to the cgroup
CPU controller (v1 `/sys/fs/cgroup/cpu`, or v2 with `cpu` in the root's subtree_control)
for `scale`. Everything it starts is stopped when it ends, on failure too.
"""

import argparse
import json
import os
import platform
import re
import resource
import signal
import statistics
import subprocess
import sys
import threading
import time
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))

from azure import Azurite  # noqa: E402
from ha_history import partition_of  # noqa: E402
from harness import Client, Server, free_port  # noqa: E402
from partitions_blob import owners, settle  # noqa: E402

BUILD = os.environ.get("BUILD", os.path.join(ROOT, "build"))
LOADGEN = os.path.join(BUILD, "loadgen")


# ---- a CPU share per server ------------------------------------------------------------

class CpuCap:
    """A cgroup of its own with a CPU quota of `cores`: every process added runs on at
    most that much CPU time, however many threads it has."""

    PERIOD_US = 100000

    def __init__(self, cores):
        name = "mutexd-bench-%d-%s" % (os.getpid(), uuid.uuid4().hex[:6])
        quota = int(cores * self.PERIOD_US)
        v1 = "/sys/fs/cgroup/cpu"
        if os.path.exists(os.path.join(v1, "cpu.cfs_quota_us")):
            self.dir = os.path.join(v1, name)
            os.mkdir(self.dir)
            self._write("cpu.cfs_period_us", self.PERIOD_US)
            self._write("cpu.cfs_quota_us", quota)
        elif "cpu" in open("/sys/fs/cgroup/cgroup.subtree_control").read().split():
            self.dir = os.path.join("/sys/fs/cgroup", name)
            os.mkdir(self.dir)
            self._write("cpu.max", "%d %d" % (quota, self.PERIOD_US))
        else:
            raise SystemExit("partitions.py: no cgroup CPU controller to write to")

    def _write(self, f, v):
        with open(os.path.join(self.dir, f), "w") as fh:
            fh.write(str(v))

    def add(self, pid):
        self._write("cgroup.procs", pid)

    def close(self):
        for _ in range(50):
            try:
                os.rmdir(self.dir)
                return
            except OSError:
                time.sleep(0.1)  # its processes are still exiting


# ---- groups ------------------------------------------------------------------------------

class Group:
    def __init__(self, az, nservers, partitions, cpu=None):
        self.container = "b" + uuid.uuid4().hex[:20]
        self.az, self.partitions, self.cpu = az, partitions, cpu
        self.servers, self.caps = [], []
        for _ in range(nservers):
            self.add()
            time.sleep(0.3)
        self.balanced()
        time.sleep(2)  # the first snapshots are done

    def balanced(self, timeout=120):
        """Until every server owns floor or ceil of its share and they all agree."""
        deadline = time.monotonic() + timeout
        n = len(self.servers)
        fair = {self.partitions // n, -(-self.partitions // n)}
        while time.monotonic() < deadline:
            m = settle(self.servers)
            if all(sum(1 for u in m.values() if u == s.url) in fair for s in self.servers):
                return m
            time.sleep(0.2)
        raise SystemExit("partitions.py: the shares did not even out")

    def add(self):
        port = free_port()
        url = "http://127.0.0.1:%d" % port
        s = Server(listen="127.0.0.1:%d" % port,
                   args=["--ha", "--advertise-url", url, "--mirror", "sync",
                         "--blob-connection-string", self.az.connection_string,
                         "--blob-container", self.container,
                         "--partitions", str(self.partitions)])
        s.url = url
        s.start(timeout=60)
        if self.cpu:
            cap = CpuCap(self.cpu)
            cap.add(s.proc.pid)
            self.caps.append(cap)
        self.servers.append(s)
        return s

    def owner_of(self, partition):
        m = owners(self.servers[0])
        return next(s for s in self.servers if s.url == m[partition])

    def close(self):
        for s in self.servers:
            try:
                if s.proc.poll() is None:
                    s.stop(timeout=60)
            except AssertionError:
                s.kill()
            s._cleanup()
        for c in self.caps:
            c.close()


def cpu_seconds(pid):
    f = open("/proc/%d/stat" % pid).read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")


def measured(g, az, seconds, connections=64):
    """loadgen's cycles per second, and the CPU (cores) of the servers, Azurite and loadgen
    over the run."""
    pids = [s.proc.pid for s in g.servers]
    before = [cpu_seconds(p) for p in pids], cpu_seconds(az.pid), \
        resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    r = cycles(loadgen(g.servers, seconds, connections=connections))
    wall = time.monotonic() - t0
    after = [cpu_seconds(p) for p in pids], cpu_seconds(az.pid), \
        resource.getrusage(resource.RUSAGE_CHILDREN)
    lg = (after[2].ru_utime + after[2].ru_stime) - (before[2].ru_utime + before[2].ru_stime)
    return r, {"servers": round(sum(a - b for a, b in zip(after[0], before[0])) / wall, 2),
               "azurite": round((after[1] - before[1]) / wall, 2),
               "loadgen": round(lg / wall, 2)}


def loadgen(servers, seconds, scenario="distinct", connections=64, extra=()):
    ports = [s.port for s in servers]
    cmd = [LOADGEN, "--target", "mutexd", "--scenario", scenario, "--port", str(ports[0]),
           "--connections", str(connections), "--duration", str(seconds), "--warmup", "2",
           "--json"] + list(extra)
    if len(ports) > 1:
        cmd += ["--group-ports", ",".join(str(p) for p in ports[1:])]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def cycles(result):
    for k in ("cycles_per_s", "cycles_per_second", "throughput"):
        if k in result:
            return result[k]
    raise SystemExit("partitions.py: no cycle rate in loadgen's answer: %r" % result)


# ---- scale and small ---------------------------------------------------------------------

def run_configs(az, a, what, configs, cpu=None):
    """Each of `configs` (key, servers, partitions) `a.reps` times, the order alternating:
    key -> [cycles per second], key -> [CPU in cores]."""
    rates, cpus = {c[0]: [] for c in configs}, {c[0]: [] for c in configs}
    for rep in range(a.reps):
        for key, n, parts in (configs if rep % 2 == 0 else configs[::-1]):
            g = Group(az, n, parts, cpu=cpu)
            try:
                r, used = measured(g, az, a.seconds, a.connections)
            finally:
                g.close()
            rates[key].append(r)
            cpus[key].append(used)
            print("%s rep %d: %d server(s), %2d partition(s)%s: %8.0f cycles/s; CPU in cores: %s"
                  % (what, rep + 1, n, parts, " at %.2f cores each" % cpu if cpu else "", r,
                     used), flush=True)
    return rates, cpus


def bench_scale(az, a, out):
    configs = [("one server", 1, 1), ("three, 1 partition", 3, 1), ("three, 16 partitions", 3, 16)]
    rates, cpus = run_configs(az, a, "scale", configs, cpu=a.cpu)
    med = {k: statistics.median(v) for k, v in rates.items()}
    base = med["one server"]
    out["scale"] = {"cpu_per_server": a.cpu, "reps": rates, "cpu": cpus, "median": med,
                    "ratio": {k: v / base for k, v in med.items()}}
    for k, v in med.items():
        print("scale: %-22s median %8.0f cycles/s, %.2fx one server" % (k, v, v / base))


def bench_small(az, a, out):
    rates, cpus = run_configs(az, a, "small", [(1, 1, 1), (16, 1, 16)])
    med = {k: statistics.median(v) for k, v in rates.items()}
    out["small"] = {"reps": rates, "cpu": cpus, "median": med, "ratio": med[16] / med[1]}
    print("small: 16 partitions at %.2fx 1 partition (%.0f against %.0f cycles/s)"
          % (med[16] / med[1], med[16], med[1]))


# ---- failure ---------------------------------------------------------------------------

class Renewer(threading.Thread):
    """Holds one resource and renews it every 100 ms at its partition's owner, moving to
    another server on a failure: every answered renew's time and latency."""

    def __init__(self, g, name, stop):
        super().__init__(daemon=True)
        self.g, self.name, self.stop = g, name, stop
        self.partition = partition_of(name, g.partitions)
        self.ok = []  # (recv time, latency s)
        self.lease = str(uuid.uuid4())

    def run(self):
        servers = list(self.g.servers)
        i = servers.index(self.g.owner_of(self.partition))
        c = None
        acquired = False
        while not self.stop.is_set():
            s = servers[i]
            try:
                c = c or Client(s.host, s.port, 1)
                t0 = time.monotonic()
                if acquired:
                    r = c.request("POST", "/v1/resources/%s/renew" % self.name,
                                  {"lease_id": self.lease})
                else:
                    r = c.request("POST", "/v1/resources/%s/acquire" % self.name,
                                  {"owner": "bench", "ttl_ms": 30000, "lease_id": self.lease})
                t1 = time.monotonic()
                if r.status == 200:
                    acquired = True
                    self.ok.append((t1, t1 - t0))
                    want = r.header("Mutexd-Served-By")
                    if want and want != s.url:
                        c.close()
                        c = None
                        i = next((j for j, x in enumerate(servers) if x.url == want), i)
                    self.stop.wait(0.1)
                    continue
            except OSError:
                pass
            if c:
                c.close()
            c = None
            i = (i + 1) % len(servers)
            self.stop.wait(0.05)
        if c:
            c.close()


def bench_failure(az, a, out):
    runs = []
    for rep in range(a.reps):
        g = Group(az, 3, 16)
        stop = threading.Event()
        try:
            names, want = [], {p: 6 for p in range(16)}
            k = 0
            while any(want.values()):
                n = "probe-%d" % k
                k += 1
                if want[partition_of(n, 16)]:
                    names.append(n)
                    want[partition_of(n, 16)] -= 1
            m = owners(g.servers[0])
            rs = [Renewer(g, n, stop) for n in names]
            for r in rs:
                r.start()
            time.sleep(5)
            victim = g.servers[rep % 3]
            lost = sorted(p for p in m if m[p] == victim.url)
            t_kill = time.monotonic()
            victim.kill()
            time.sleep(15)
            stop.set()
            for r in rs:
                r.join(timeout=5)
        finally:
            g.close()
        paused, others_before, others_after = [], [], []
        for r in rs:
            times = [t for t, _ in r.ok if t >= t_kill - 3] + [t_kill + 15]
            gap = max(b - a_ for a_, b in zip([t_kill - 3] + times, times))
            if gap > 1.0:
                paused.append(r.name)
            if r.partition not in lost:
                others_before += [lat for t, lat in r.ok if t_kill - 5 <= t < t_kill]
                others_after += [lat for t, lat in r.ok if t_kill <= t < t_kill + 10]
        share = len(paused) / len(rs)

        def p99(v):
            return sorted(v)[int(len(v) * 0.99)] * 1000 if v else float("nan")
        run = {"killed_partitions": len(lost), "paused": len(paused), "resources": len(rs),
               "share_paused": share, "share_owned": len(lost) / 16,
               "paused_outside_lost": [n for n in paused
                                       if partition_of(n, 16) not in lost],
               "others_p99_ms_before": p99(others_before),
               "others_p99_ms_after": p99(others_after)}
        runs.append(run)
        print("failure rep %d: killed a server of %d partitions of 16 (%.0f%%); %d of %d "
              "resources paused > 1 s (%.0f%%), %d of them elsewhere; the others' renew p99 "
              "%.1f ms before, %.1f ms in the 10 s after"
              % (rep + 1, len(lost), 100 * len(lost) / 16, len(paused), len(rs), 100 * share,
                 len(run["paused_outside_lost"]), run["others_p99_ms_before"],
                 run["others_p99_ms_after"]), flush=True)
    out["failure"] = runs


# ---- takeover with many leases ---------------------------------------------------------

def first_answer(g, s, partition, t_kill, timeout=120):
    """Seconds from t_kill to the first 200 on a fresh resource of `partition` at s."""
    k = 0
    c = Client(s.host, s.port, 5)
    try:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            n = "first-%s-%d" % (uuid.uuid4().hex[:6], k)
            k += 1
            if partition_of(n, g.partitions) != partition:
                continue
            try:
                r = c.request("POST", "/v1/resources/%s/acquire" % n,
                              {"owner": "bench", "ttl_ms": 60000})
            except OSError:
                c.close()
                c = Client(s.host, s.port, 5)
                continue
            if r.status == 200:
                return time.monotonic() - t_kill
            time.sleep(0.01)
    finally:
        c.close()
    return float("nan")


def held_leases(s):
    c = Client(s.host, s.port, 10)
    try:
        body = c.request("GET", "/metrics").body
    finally:
        c.close()
    return sum(int(v) for v in re.findall(r"^mutexd_leases_held(?:\{[^}]*\})? (\d+)$", body,
                                          re.M))


def bench_takeover(az, a, out):
    res = {}
    for parts in (1, 16):
        g = Group(az, 2, parts)
        try:
            t0 = time.monotonic()
            r = loadgen(g.servers, 600, scenario="fill",
                        extra=["--max-requests", str(a.leases), "--ttl-ms", "3600000",
                               "--warmup", "0"])
            fill_s = time.monotonic() - t0
            held = sum(held_leases(s) for s in g.servers)
            victim = g.owner_of(0)
            survivor = next(s for s in g.servers if s is not victim)
            lost = sorted(p for p, u in owners(survivor).items() if u == victim.url)
            since = len(survivor.lines)
            t_kill = time.monotonic()
            victim.kill()
            first = first_answer(g, survivor, lost[0], t_kill)
            deadline = time.monotonic() + 120
            took = []
            while time.monotonic() < deadline:
                took = [l for l in survivor.lines[since:] if "serving as the active server" in l]
                if len(took) >= len(lost):
                    break
                time.sleep(0.2)
            ms = [int(re.search(r"took_ms=(\d+)", l).group(1)) for l in took]
            leases = [int(re.search(r"leases=(\d+)", l).group(1)) for l in took]
        finally:
            g.close()
        res[parts] = {"filled": held, "fill_s": fill_s, "fill_rate": r.get("requests_per_s"),
                      "partitions_taken": len(lost), "first_answer_s": first,
                      "took_ms": ms, "leases_per_takeover": leases}
        print("takeover, %2d partition(s): %d leases held (filled in %.0f s); killed the "
              "owner of %d; first 200 on partition %d %.2f s after the kill; each takeover "
              "took %s ms with %s leases"
              % (parts, held, fill_s, len(lost), lost[0], first, ms, leases), flush=True)
    out["takeover"] = res


def machine():
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo")
                if l.startswith("model name")), "?")
    mem = int(open("/proc/meminfo").readline().split()[1]) / 1024 / 1024
    commit = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"],
                            capture_output=True, text=True).stdout.strip()
    return {"cores": os.cpu_count(), "cpu": cpu, "mem_gib": round(mem, 1),
            "kernel": platform.release(), "commit": commit,
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", default="scale,small,failure,takeover")
    ap.add_argument("--cpu", type=float, default=0.25)
    ap.add_argument("--seconds", type=float, default=10)
    ap.add_argument("--connections", type=int, default=64)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--leases", type=int, default=300000)
    ap.add_argument("--json")
    a = ap.parse_args()
    if not os.access(LOADGEN, os.X_OK):
        raise SystemExit("partitions.py: no %s (make build)" % LOADGEN)
    out = {"machine": machine()}
    print("partitions.py: %(commit)s, %(cores)d cores, %(cpu)s, %(mem_gib)s GiB, "
          "Linux %(kernel)s, %(date)s" % out["machine"], flush=True)
    az = Azurite()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    try:
        for what in a.only.split(","):
            {"scale": bench_scale, "small": bench_small, "failure": bench_failure,
             "takeover": bench_takeover}[what](az, a, out)
    finally:
        az.stop()
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
