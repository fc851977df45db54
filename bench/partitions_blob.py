#!/usr/bin/env python3
"""What a partitioned group asks of the blob store: blob requests per server per second, by
kind, for each partition count, idle and under a light load.

    bench/partitions_blob.py [--counts 1,16,64] [--servers 3] [--seconds 10]

For each count: a fresh container on one Azurite, `--servers` servers with `--ha
--partitions N`, each reaching Azurite through a counting proxy of its own
(tests/integration/faultproxy.py); once every partition has an owner and the servers agree,
it counts every proxy's requests for `--seconds` idle, then as long again while one client
per server cycles acquire + release on names of every partition. Prints a table (requests
per server per second: all, and by kind) and writes every figure to --json. Loopback only;
everything it starts is stopped when it ends, on failure too.
"""

import argparse
import json
import os
import re
import sys
import threading
import time
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "integration"))

from azure import Azurite  # noqa: E402
from faultproxy import FaultProxy  # noqa: E402
from harness import Client, Server, free_port  # noqa: E402


def kind(method, target):
    """A request's kind, from its method and target."""
    path, _, query = target.partition("?")
    if "comp=list" in query:
        return "list"
    if "comp=lease" in query:
        return "lease"
    if "comp=appendblock" in query:
        return "append"
    if "/servers/" in path:
        return "heartbeat " + method
    if path.endswith("/owner"):
        return "owner " + method
    if "journal" in path:
        return "journal " + method
    if "snapshot" in path:
        return "snapshot " + method
    return method


def owners(s):
    c = Client(s.host, s.port, 5)
    try:
        r = c.request("GET", "/v1/servers")
        v = r.json if r.status == 200 else None
    except OSError:
        v = None
    finally:
        c.close()
    if not v:
        return None
    if "partitions" not in v:
        return {0: (v.get("active") or {}).get("url")}
    return {o["partition"]: o["url"] for o in v["partitions"]["owners"]}


def settle(servers, timeout=120):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        maps = [owners(s) for s in servers]
        if maps[0] and all(m == maps[0] for m in maps) and all(maps[0].values()):
            return maps[0]
        time.sleep(0.2)
    raise SystemExit("the partitions did not settle")


def counting(p):
    """Counts every request `p` passes on, by kind, in p.kinds."""
    p.kinds = {}
    note = p._note

    def counted(req, what):
        k = kind(req.method, req.target)
        with p.lock:
            p.kinds[k] = p.kinds.get(k, 0) + 1
        note(req, what)
    p._note = counted
    return p


def count(proxies, seconds):
    """Requests of each proxy by kind over `seconds`."""
    def snap():
        out = []
        for p in proxies:
            with p.lock:
                out.append(dict(p.kinds))
        return out
    before = snap()
    time.sleep(seconds)
    after = snap()
    return [{k: a[k] - b.get(k, 0) for k in a if a[k] - b.get(k, 0)}
            for a, b in zip(after, before)]


def load(servers, stop, n):
    def run(s, i):
        c = Client(s.host, s.port, 10)
        k = 0
        while not stop.is_set():
            name = "bench-%d-%d" % (i, k % 64)
            k += 1
            r = c.request("POST", "/v1/resources/%s/acquire" % name,
                          {"owner": "bench", "ttl_ms": 10000})
            if r.status == 200:
                c.request("POST", "/v1/resources/%s/release" % name,
                          {"lease_id": r.json["lease_id"]})
        c.close()
    ts = [threading.Thread(target=run, args=(s, i), daemon=True)
          for i, s in enumerate(servers) for _ in range(n)]
    for t in ts:
        t.start()
    return ts


def run_count(az, n, nservers, seconds):
    container = "b" + uuid.uuid4().hex[:20]
    proxies = [counting(FaultProxy(az)) for _ in range(nservers)]
    servers = []
    try:
        for i in range(nservers):
            port = free_port()
            url = "http://127.0.0.1:%d" % port
            s = Server(listen="127.0.0.1:%d" % port,
                       args=["--ha", "--advertise-url", url, "--mirror", "sync",
                             "--blob-connection-string", proxies[i].connection_string,
                             "--blob-container", container, "--partitions", str(n)])
            s.start(timeout=60)
            servers.append(s)
            time.sleep(0.3)
        settle(servers)
        time.sleep(3)  # the first snapshots and moves are done
        idle = count(proxies, seconds)
        stop = threading.Event()
        threads = load(servers, stop, 1)
        time.sleep(1)
        busy = count(proxies, seconds)
        stop.set()
        for t in threads:
            t.join(timeout=20)
        return idle, busy
    finally:
        for s in servers:
            try:
                s.stop(timeout=60)
            except AssertionError:
                s.kill()
                s._cleanup()
        for p in proxies:
            p.close()


def per_server_second(samples, seconds):
    kinds = sorted({k for s in samples for k in s})
    total = sum(sum(s.values()) for s in samples) / len(samples) / seconds
    return total, {k: sum(s.get(k, 0) for s in samples) / len(samples) / seconds for k in kinds}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--counts", default="1,16,64")
    ap.add_argument("--servers", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=10)
    ap.add_argument("--json")
    a = ap.parse_args()
    az = Azurite()
    results = {}
    try:
        for n in [int(x) for x in a.counts.split(",")]:
            idle, busy = run_count(az, n, a.servers, a.seconds)
            results[n] = {"idle": per_server_second(idle, a.seconds),
                          "load": per_server_second(busy, a.seconds)}
            for what in ("idle", "load"):
                total, by = results[n][what]
                print("N=%-3d %-4s %7.1f blob requests per server per second: %s" % (
                    n, what, total, ", ".join("%s %.1f" % (k, v) for k, v in by.items())),
                    flush=True)
    finally:
        az.stop()
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
