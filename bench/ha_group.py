#!/usr/bin/env python3
"""A server group (--ha) on loopback against one Azurite: takeover times and throughput.

    ha_group.py takeover   --signal KILL|TERM [--rounds 20] ...
    ha_group.py throughput [--reps 3] [--seconds 10] [--connections 16,64] ...

takeover: three servers on one fresh container, some held leases; each round finds the
active (every live server names it in GET /v1/servers), sends it the signal, and measures
from the signal to the first acquire of a new resource answered 200 through a standby (one
client per standby, a new attempt every 10 ms after each answer that is not 200). Then it
starts the stopped server again on its port (a standby now) and waits until the three agree
again. Each round's time is split with the new active's log: detection (until it broke the
old lease), the owner lease (break + acquire), the take-over work (its took_ms: seal, read
the snapshot and journal, new snapshot, token reservation) and the rest (the answer reaching
the client through a standby).

throughput: bench/loadgen (distinct keys: acquire + release) against one server with --ha
alone, against the active of a group of three, and through a standby of that group (which
forwards), at each connection count; the configurations alternate in order between
repetitions, each on a fresh container.

Writes one JSON object (every figure) to --json and prints a summary. Loopback only; every
server it starts is stopped when it ends, on failure too.
"""

import argparse
import datetime
import http.client
import json
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def request(port, method, path, body=None, timeout=5.0):
    """One request on its own connection: (status, headers, parsed JSON or None)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        data = json.dumps(body).encode() if body is not None else None
        hdrs = {"Content-Type": "application/json"} if data else {}
        conn.request(method, path, body=data, headers=hdrs)
        r = conn.getresponse()
        raw = r.read()
        try:
            doc = json.loads(raw) if raw else None
        except ValueError:
            doc = None
        return r.status, {k.lower(): v for k, v in r.getheaders()}, doc
    finally:
        conn.close()


def log_time(line):
    m = re.match(r"ts=(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3})Z ", line)
    if not m:
        return None
    t = datetime.datetime.strptime(m.group(1), "%Y-%m-%dT%H:%M:%S.%f")
    return t.replace(tzinfo=datetime.timezone.utc).timestamp()


class Server:
    """One mutexd of a group, on a port fixed for its whole life (its advertised URL)."""

    def __init__(self, args, work, name, container, extra=()):
        self.bin = args.bin
        self.cs = args.connection_string
        self.container = container
        self.port = free_port()
        self.url = "http://127.0.0.1:%d" % self.port
        self.name = name
        self.data = os.path.join(work, name)
        self.work = work
        self.extra = list(extra)
        self.proc = None
        self.logs = []
        os.makedirs(self.data, exist_ok=True)

    @property
    def log(self):
        return self.logs[-1]

    def start(self, timeout=20):
        for attempt in range(50):  # the port may still be held for a moment after a kill
            path = os.path.join(self.work, "%s.%d.log" % (self.name, len(self.logs)))
            self.logs.append(path)
            with open(path, "w") as f:
                self.proc = subprocess.Popen(
                    [self.bin, "--listen", "127.0.0.1:%d" % self.port, "--data-dir", self.data,
                     "--ha", "--advertise-url", self.url, "--mirror", "sync",
                     "--blob-connection-string", self.cs, "--blob-container", self.container]
                    + self.extra, stdout=f, stderr=f, stdin=subprocess.DEVNULL)
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                if 'msg="started"' in self.text():
                    return self
                if self.proc.poll() is not None:
                    break
                time.sleep(0.02)
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
                raise RuntimeError("%s did not start:\n%s" % (self.name, self.text()[-3000:]))
            time.sleep(0.1)
        raise RuntimeError("%s would not start:\n%s" % (self.name, self.text()[-3000:]))

    def text(self, which=-1):
        try:
            with open(self.logs[which], errors="replace") as f:
                return f.read()
        except (OSError, IndexError):
            return ""

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout=20):
        if not self.alive():
            return self.proc.returncode if self.proc else 0
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            return None

    def kill(self):
        if self.alive():
            self.proc.kill()
            self.proc.wait()

    def view(self):
        try:
            st, _, doc = request(self.port, "GET", "/v1/servers", timeout=5)
            return doc if st == 200 else None
        except OSError:
            return None


class Group:
    def __init__(self, args, work, n, tag):
        self.container = "bench%s%s" % (tag, uuid.uuid4().hex[:16])
        extra = ["--failover-after-ms", str(args.failover_after_ms)] \
            if args.failover_after_ms else []
        self.servers = [Server(args, work, "%s%d" % (tag, i), self.container, extra)
                        for i in range(n)]

    def start(self):
        for s in self.servers:
            s.start()
        return self

    def stop(self):
        for s in self.servers:
            s.stop()
            s.kill()

    def alive(self):
        return [s for s in self.servers if s.alive()]

    def agreed(self, timeout=60):
        """The active every live server names, once one is active and the others standbys."""
        deadline = time.monotonic() + timeout
        views = []
        while time.monotonic() < deadline:
            live = self.alive()
            views = [s.view() for s in live]
            urls = {v["active"]["url"] if v and v.get("active") else None for v in views}
            roles = sorted(v["self"]["role"] if v else "?" for v in views)
            if len(urls) == 1 and None not in urls and \
                    roles == ["active"] + ["standby"] * (len(live) - 1):
                url = urls.pop()
                return next(s for s in self.servers if s.url == url)
            time.sleep(0.05)
        raise RuntimeError("the group does not agree: %r" % views)


def fill(port, n, prefix, threads=8):
    """n held leases (TTL 1 h) acquired on `port`, a few connections at a time."""
    errors = []

    def worker(k):
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        for i in range(k, n, threads):
            conn.request("POST", "/v1/resources/%s-%d/acquire" % (prefix, i),
                         body=json.dumps({"owner": "bench", "ttl_ms": 3600000}),
                         headers={"Content-Type": "application/json"})
            r = conn.getresponse()
            r.read()
            if r.status != 200:
                errors.append(r.status)
        conn.close()

    ts = [threading.Thread(target=worker, args=(k,)) for k in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    if errors:
        raise RuntimeError("filling: %d acquires not answered 200 (%s)" % (len(errors), errors[:5]))


def poll_acquire(port, prefix, done, out, limit):
    """Acquires new resources through `port` until one is answered 200 (or `done` is set):
    a new attempt 10 ms after each other answer or error. Records the first 200 in out."""
    n = 0
    conn = None
    while not done.is_set() and time.monotonic() < limit:
        n += 1
        try:
            if conn is None:
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            conn.request("POST", "/v1/resources/%s-%d/acquire" % (prefix, n),
                         body=json.dumps({"owner": "bench", "ttl_ms": 60000}),
                         headers={"Content-Type": "application/json"})
            r = conn.getresponse()
            r.read()
            t = time.monotonic()
            if r.status == 200:
                if not done.is_set():
                    out.append((t, port, r.getheader("Mutexd-Served-By"), n))
                    done.set()
                break
            if r.getheader("Connection", "").lower() == "close":
                conn.close()
                conn = None
        except (OSError, http.client.HTTPException):
            if conn is not None:
                conn.close()
            conn = None
        time.sleep(0.01)
    if conn is not None:
        conn.close()


def takeover_round(group, sig, k, args):
    old = group.agreed()
    standbys = [s for s in group.alive() if s is not old]
    done = threading.Event()
    out = []
    wall0 = time.time()
    t0 = time.monotonic()
    os.kill(old.proc.pid, sig)
    limit = t0 + 60
    pollers = [threading.Thread(target=poll_acquire,
                                args=(s.port, "takeover-%d-%d" % (k, i), done, out, limit))
               for i, s in enumerate(standbys)]
    for p in pollers:
        p.start()
    for p in pollers:
        p.join()
    if not out:
        raise RuntimeError("round %d: no acquire answered 200 within 60 s" % k)
    t1, port, served_by, attempts = out[0]
    rc = old.proc.wait(30)
    new = next((s for s in standbys if s.url == served_by), None)
    row = {"round": k, "signal": signal.Signals(sig).name, "ms": round((t1 - t0) * 1000, 1),
           "old": old.url, "new": served_by, "attempts": attempts, "old_exit": rc}
    # The servers' own account of it, from their logs (timestamps in whole milliseconds).
    def events(server, what):
        for line in server.text().splitlines():
            t = log_time(line)
            if t is not None and t >= wall0 - 0.002 and what in line:
                yield t, line

    breaks = sorted((t, s.url) for s in standbys for t, _ in events(s, "breaking its lease"))
    if breaks:
        row["broken_by"] = breaks[0][1]
    if new is not None:
        serving = [(t, int(re.search(r"took_ms=(\d+)", line).group(1)))
                   for t, line in events(new, 'msg="serving as the active server"')]
        if serving:
            t_serve, took = serving[0]
            start = t_serve - took / 1000.0  # when it had the owner lease and began
            row["took_ms"] = took
            row["until_lease_ms"] = round((start - wall0) * 1000)
            if breaks:
                row["detect_ms"] = round((breaks[0][0] - wall0) * 1000)
                row["lease_ms"] = round((start - breaks[0][0]) * 1000)
            row["after_ms"] = round(row["ms"] - (t_serve - wall0) * 1000)
    if sig == signal.SIGTERM and rc != 0:
        raise RuntimeError("round %d: the old active exited %s on SIGTERM:\n%s"
                           % (k, rc, old.text()[-3000:]))
    # Back as a standby, on its port; then wait for the three to agree.
    old.start()
    settled = group.agreed()
    # Every term as active begun since the signal: more than one is a second takeover.
    terms = sorted((t, s.url) for s in group.servers
                   for t, _ in events(s, 'msg="serving as the active server"'))
    row["takeovers"] = len(terms)
    row["lease_breaks"] = sum(1 for s in group.servers for _ in events(s, "breaking its lease"))
    row["settled_on"] = settled.url
    if len(terms) != 1 or settled.url != served_by:
        print("  round %d: %d takeovers (%s), settled on %s" % (
            k, len(terms), ", ".join(u for _, u in terms), settled.url), flush=True)
    return row


def pct(values, p):
    s = sorted(values)
    if not s:
        return None
    i = max(0, min(len(s) - 1, int(round(p / 100.0 * len(s) + 0.5)) - 1))
    return s[i]


def summary(values):
    return {"n": len(values), "min": min(values), "p50": pct(values, 50),
            "p90": pct(values, 90), "max": max(values),
            "mean": round(statistics.mean(values), 1)}


def cmd_takeover(args, work):
    sig = {"KILL": signal.SIGKILL, "TERM": signal.SIGTERM}[args.signal]
    group = Group(args, work, 3, "t" + args.signal.lower()[0])
    rows = []
    try:
        group.start()
        active = group.agreed()
        if args.leases:
            t = time.monotonic()
            fill(active.port, args.leases, "held")
            print("  %d held leases acquired in %.1f s" % (args.leases, time.monotonic() - t),
                  flush=True)
        for k in range(1, args.rounds + 1):
            row = takeover_round(group, sig, k, args)
            rows.append(row)
            parts = ["%s=%s" % (key, row[key]) for key in
                     ("until_lease_ms", "detect_ms", "lease_ms", "took_ms", "after_ms")
                     if key in row]
            print("  round %2d: %7.1f ms  (%s)  %s -> %s" % (k, row["ms"], " ".join(parts),
                                                          row["old"], row["new"]), flush=True)
    finally:
        group.stop()
    ms = [r["ms"] for r in rows]
    result = {"kind": "takeover", "signal": args.signal, "rounds": rows,
              "held_leases": args.leases, "summary": summary(ms),
              "failover_after_ms": args.failover_after_ms or 3000}
    for key in ("detect_ms", "lease_ms", "took_ms", "after_ms", "until_lease_ms"):
        vals = [r[key] for r in rows if key in r]
        if vals:
            result[key] = summary(vals)
    s = result["summary"]
    print("  SIG%s: min %.0f  p50 %.0f  p90 %.0f  max %.0f ms" %
          (args.signal, s["min"], s["p50"], s["p90"], s["max"]), flush=True)
    return result


def loadgen(args, port, conns, group_ports=()):
    cmd = [args.loadgen, "--target", "mutexd", "--port", str(port), "--scenario", "distinct",
           "--connections", str(conns), "--duration", str(args.seconds),
           "--warmup", str(args.warmup), "--json"]
    if group_ports:
        cmd += ["--group-ports", ",".join(str(p) for p in group_ports)]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=args.seconds + 120)
    if p.returncode != 0:
        raise RuntimeError("loadgen exited %d: %s" % (p.returncode, p.stderr[-500:]))
    return json.loads(p.stdout)


def cmd_throughput(args, work):
    conns = [int(c) for c in args.connections.split(",")]
    runs = []
    for rep in range(args.reps):
        # alone first on even repetitions, the group first on odd ones; within the group,
        # the active first or the standby first likewise.
        order = ["alone", "group"] if rep % 2 == 0 else ["group", "alone"]
        inner = ["active", "standby", "following"] if rep % 2 == 0 else \
            ["following", "standby", "active"]
        for what in order:
            group = Group(args, work, 1 if what == "alone" else 3, "p%d%s" % (rep, what[0]))
            try:
                group.start()
                active = group.agreed()
                targets = [("alone", active)] if what == "alone" else \
                    [(w, active if w == "active" else
                      next(s for s in group.servers if s is not active)) for w in inner]
                for name, server in targets:
                    # following: a client given the group's URLs, a standby's first, that
                    # moves to the active its answers name (Mutexd-Served-By), as the
                    # clients do; standby: one that stays on the standby.
                    others = [s.port for s in group.servers if s is not server] \
                        if name == "following" else []
                    for c in (conns if rep % 2 == 0 else conns[::-1]):
                        j = loadgen(args, server.port, c, others)
                        errs = sum(j.get("errors", {}).values())
                        row = {"rep": rep + 1, "config": name, "connections": c,
                               "cycles_per_s": j["cycles_per_s"],
                               "requests_per_s": j["requests_per_s"],
                               "cycle_p50_ms": j["latency"]["cycle"]["p50_ms"],
                               "cycle_p99_ms": j["latency"]["cycle"]["p99_ms"],
                               "errors": errs, "loadgen_cpu_pct": j.get("loadgen_cpu_pct"),
                               "moves": j.get("moves", 0)}
                        runs.append(row)
                        print("  rep %d  %-8s x%-3d %8.0f cycles/s  cycle p50 %.2f ms  p99 %.2f ms"
                              "  errors %d" % (rep + 1, name, c, row["cycles_per_s"],
                                               row["cycle_p50_ms"], row["cycle_p99_ms"], errs),
                              flush=True)
            finally:
                group.stop()
    table = []
    for name in ("alone", "active", "standby", "following"):
        for c in conns:
            v = [r["cycles_per_s"] for r in runs if r["config"] == name and r["connections"] == c]
            p50 = [r["cycle_p50_ms"] for r in runs
                   if r["config"] == name and r["connections"] == c]
            if v:
                table.append({"config": name, "connections": c, "values": v,
                              "mean": round(statistics.mean(v)), "min": min(v), "max": max(v),
                              "cycle_p50_ms_median": statistics.median(p50)})
    return {"kind": "throughput", "seconds": args.seconds, "warmup": args.warmup,
            "reps": args.reps, "runs": runs, "table": table}


def cmd_report(args):
    meta = dict(kv.split("=", 1) for kv in args.meta)
    parts = [json.load(open(p)) for p in args.inputs]
    kill = next(p for p in parts if p["kind"] == "takeover" and p["signal"] == "KILL")
    term = next(p for p in parts if p["kind"] == "takeover" and p["signal"] == "TERM")
    tput = next(p for p in parts if p["kind"] == "throughput")
    doc = {"meta": meta, "kill": kill, "term": term, "throughput": tput}
    with open(args.json, "w") as f:
        json.dump(doc, f, indent=1)

    def n(v):
        return "-" if v is None else "{:,.0f}".format(v)

    def srow(label, s):
        if not s:
            return "| %s | | | | |" % label
        return "| %s | %s | %s | %s | %s |" % (label, n(s["min"]), n(s["p50"]), n(s["p90"]),
                                               n(s["max"]))

    L = []
    L.append("# A server group: takeover times and throughput")
    L.append("")
    L.append("commit `%s` · %s · %s · mutexd %s (%s build)" % (
        meta["commit"], meta["date"], meta["machine"], meta["version"], meta["build"]))
    L.append("")
    L.append("Load average (1, 5, 15 min) at the start %s; after the SIGKILL rounds %s; after "
             "the SIGTERM rounds %s; at the end %s. CPU steal during the runs: %s%%. The same "
             "cores ran the servers, Azurite and the clients." % (
                 meta["load_start"], meta["load_kill"], meta["load_term"], meta["load_end"],
                 meta["steal"]))
    if meta.get("quick") == "1":
        L.append("")
        L.append("(--quick: a smoke test, not a measurement)")
    for part, title in ((kill, "Takeover after SIGKILL"), (term, "Handover on SIGTERM")):
        rows = part["rounds"]
        L.append("")
        L.append("## %s (%d rounds, failover after %d ms, %s held leases)" % (
            title, len(rows), part["failover_after_ms"], "{:,}".format(part["held_leases"])))
        L.append("")
        L.append("| ms | min | p50 | p90 | max |")
        L.append("|---|---:|---:|---:|---:|")
        L.append(srow("**signal → first acquire answered 200 through a standby**",
                      part["summary"]))
        if part["signal"] == "KILL":
            L.append(srow("detection: signal → the standby breaks the owner lease",
                          part.get("detect_ms")))
            L.append(srow("owner lease: break + acquire", part.get("lease_ms")))
        else:
            L.append(srow("signal → the standby holds the owner lease", part.get("until_lease_ms")))
        L.append(srow("take-over work (`took_ms`)", part.get("took_ms")))
        L.append(srow("the rest: the answer reaching the client", part.get("after_ms")))
        L.append("")
        L.append("Every round, ms: " + ", ".join("%.0f" % r["ms"] for r in rows) + ".")
        multi = [r for r in rows if r.get("takeovers", 1) != 1]
        L.append("Servers that began a term as active after the signal: %s (rounds with more "
                 "than one: %d); owner lease breaks: %s." % (
                     ", ".join(str(r.get("takeovers", "?")) for r in rows), len(multi),
                     ", ".join(str(r.get("lease_breaks", "?")) for r in rows)))
        if part["signal"] == "TERM":
            codes = sorted({r["old_exit"] for r in rows})
            L.append("The old active's exit status: %s." % ", ".join(str(c) for c in codes))
            limit, ok = "< 1 s", part["summary"]["max"] < 1000
        else:
            limit, ok = "≤ 5 s", part["summary"]["max"] <= 5000
        L.append("Target %s (every round): **%s** (max %.0f ms)." % (
            limit, "met" if ok else "missed", part["summary"]["max"]))
    L.append("")
    L.append("## Throughput: acquire + release cycles/s (distinct keys, %g s after %g s of "
             "warm-up, %d repetitions)" % (tput["seconds"], tput["warmup"], tput["reps"]))
    L.append("")
    conns = sorted({r["connections"] for r in tput["table"]})
    L.append("| clients talk to | " + " | ".join("×%d: mean (min–max)" % c for c in conns)
             + " | " + " | ".join("×%d cycle p50 ms" % c for c in conns) + " |")
    L.append("|---|" + "---:|" * (2 * len(conns)))
    labels = {"alone": "one server with --ha, alone", "active": "the active, two standbys",
              "standby": "a standby (forwarding)",
              "following": "the group's URLs, a standby first (following Mutexd-Served-By)"}
    cell = {(t["config"], t["connections"]): t for t in tput["table"]}
    for cfg in ("alone", "active", "standby", "following"):
        row = "| %s |" % labels[cfg]
        for c in conns:
            t = cell.get((cfg, c))
            row += " %s (%s–%s) |" % (n(t["mean"]), n(t["min"]), n(t["max"])) if t else " |"
        for c in conns:
            t = cell.get((cfg, c))
            row += " %.2f |" % t["cycle_p50_ms_median"] if t else " |"
        L.append(row)
    for a, b, label in (("active", "alone", "active with standbys / alone"),
                        ("standby", "active", "through a standby / the active"),
                        ("following", "active", "a standby first, following / the active")):
        row = "| *%s* |" % label
        for c in conns:
            x, y = cell.get((a, c)), cell.get((b, c))
            row += " %.2f× |" % (x["mean"] / y["mean"]) if x and y and y["mean"] else " |"
        L.append(row + " |" * len(conns))
    L.append("")
    L.append("Every run, in the order run (cycles/s; errors: any kind):")
    L.append("")
    L.append("| rep | clients talk to | connections | cycles/s | cycle p50 / p99 ms | errors |")
    L.append("|---:|---|---:|---:|---|---:|")
    for r in tput["runs"]:
        L.append("| %d | %s | %d | %s | %.2f / %.2f | %d |" % (
            r["rep"], r["config"], r["connections"], n(r["cycles_per_s"]), r["cycle_p50_ms"],
            r["cycle_p99_ms"], r["errors"]))
    with open(args.md, "w") as f:
        f.write("\n".join(L) + "\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("what", choices=["takeover", "throughput", "report"])
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "mutexd"))
    ap.add_argument("--loadgen", default=os.path.join(ROOT, "build", "loadgen"))
    ap.add_argument("--connection-string")
    ap.add_argument("--signal", choices=["KILL", "TERM"], default="KILL")
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--leases", type=int, default=1000,
                    help="held leases in the group before the first round")
    ap.add_argument("--failover-after-ms", type=int, default=0,
                    help="passed to the servers when set (default: theirs, 3000)")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=10)
    ap.add_argument("--warmup", type=float, default=2)
    ap.add_argument("--connections", default="16,64")
    ap.add_argument("--json", required=True)
    ap.add_argument("--logs", help="copy every server's log into this directory at the end")
    ap.add_argument("--md", help="report: the Markdown written")
    ap.add_argument("--inputs", nargs="*", default=[], help="report: the JSON of the runs")
    ap.add_argument("--meta", nargs="*", default=[], help="report: KEY=VALUE, the machine")
    args = ap.parse_args()
    if args.what == "report":
        cmd_report(args)
        return
    if not args.connection_string:
        ap.error("--connection-string is needed")
    work = tempfile.mkdtemp(prefix="mutexd-ha-bench-")
    # SIGTERM/SIGINT unwind through the finally blocks that stop the servers.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    ok = False
    try:
        result = cmd_takeover(args, work) if args.what == "takeover" else \
            cmd_throughput(args, work)
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
        ok = True
    finally:
        if args.logs:
            os.makedirs(args.logs, exist_ok=True)
            for name in os.listdir(work):
                if name.endswith(".log"):
                    shutil.copy(os.path.join(work, name), args.logs)
        if ok:
            shutil.rmtree(work, ignore_errors=True)
        else:
            print("ha_group.py: server logs kept in %s" % work, file=sys.stderr)


if __name__ == "__main__":
    main()
