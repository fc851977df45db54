"""A running server group scraped by a real Prometheus: every metric that the alert rules
(deploy/prometheus/mutexd-alerts.yml) and the Grafana dashboard (deploy/grafana/mutexd.json)
name must be among the series Prometheus scraped, and every query of the dashboard must be
one Prometheus runs and answers with data.

Starts, on free loopback ports: Azurite (scripts/azurite.sh), three `mutexd --ha` servers
on it (MUTEXD_BIN, default build/mutexd), and Debian's `prometheus` scraping them every
second with the alert rules loaded. Sends the traffic that makes every series appear (a
grant through a standby, so that it is forwarded; a conflict; a renewal; a late renewal; a
waiter; a release), waits for a few scrapes, then asks Prometheus's HTTP API:
  - /api/v1/targets: every server is up;
  - /api/v1/rules: every alert rule is loaded and evaluated without error;
  - /api/v1/series: each metric name the rules and the dashboard use has series (and a
    name no server exports, mutexd_no_such_metric, has none: the check can fail);
  - /api/v1/query: each dashboard query, its variables set ($job, $instance,
    $__rate_interval), parses and returns at least one series.
Stops everything it started and removes its folder (Prometheus's data among it), also
when it fails.

    MUTEXD_BIN=build/mutexd python3 tests/deploy/scrape.py"""

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
RULES = os.path.join(ROOT, "deploy", "prometheus", "mutexd-alerts.yml")
DASHBOARD = os.path.join(ROOT, "deploy", "grafana", "mutexd.json")
JOB = "mutexd"
SERVERS = 3
# A name no server exports: the check must report it missing.
CANARY = "mutexd_no_such_metric"


class Failed(Exception):
    pass


def say(text):
    print("scrape: %s" % text, flush=True)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http(url, body=None, timeout=5.0):
    """(status, JSON or None)."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method="POST" if body is not None else "GET")
    if body is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, json.load(r)
    except urllib.error.HTTPError as e:
        try:
            return e.code, json.load(e)
        except ValueError:
            return e.code, None


def wait_for(what, fn, within_s):
    deadline = time.time() + within_s
    while True:
        try:
            v = fn()
            if v:
                return v
        except (OSError, ValueError, KeyError):
            pass
        if time.time() > deadline:
            raise Failed("%s: not within %.0f s" % (what, within_s))
        time.sleep(0.2)


def names_in(expr):
    """The metric names an expression reads: mutexd_* names, and `up`."""
    names = set(re.findall(r"\bmutexd_[a-z0-9_]+\b", expr))
    if re.search(r"\bup\s*[{\[(]", expr):
        names.add("up")
    return names


def rule_exprs():
    import yaml  # python3-yaml, as in the compose checks
    with open(RULES) as f:
        doc = yaml.safe_load(f)
    return {r.get("alert") or r.get("record"): r["expr"] for g in doc["groups"] for r in g["rules"]}


def dashboard_exprs():
    with open(DASHBOARD) as f:
        dash = json.load(f)
    out = []

    def walk(panels):
        for p in panels:
            for t in p.get("targets", []):
                out.append((p["title"], t["expr"]))
            walk(p.get("panels", []))
    walk(dash["panels"])
    for v in dash.get("templating", {}).get("list", []):
        if v.get("type") == "query":
            q = v["query"]["query"] if isinstance(v["query"], dict) else v["query"]
            m = re.fullmatch(r"label_values\((.*),\s*\w+\)", q.strip())
            if not m:
                raise Failed("dashboard variable %s: %r is not label_values(...)" % (v["name"], q))
            out.append(("variable " + v["name"], m.group(1)))
    return out


def grafana_vars(expr):
    return (expr.replace("$__rate_interval", "1m").replace("$job", JOB)
            .replace("$instance", ".*"))


class Run:
    def __init__(self, work):
        self.work = work
        self.procs = []
        self.az = os.path.join(work, "azurite")

    def start(self, argv, log, **kw):
        f = open(os.path.join(self.work, log), "wb")
        p = subprocess.Popen(argv, stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, **kw)
        f.close()
        self.procs.append(p)
        return p

    def stop(self):
        for p in reversed(self.procs):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in reversed(self.procs):
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        if os.path.exists(os.path.join(self.az, "pid")):
            subprocess.run([os.path.join(ROOT, "scripts", "azurite.sh"), "stop", self.az],
                           check=False)

    def tail(self, log, n=15):
        try:
            with open(os.path.join(self.work, log), errors="replace") as f:
                return "".join(f.readlines()[-n:])
        except OSError:
            return ""


def traffic(urls):
    """Requests that make every series of the rules and the dashboard appear."""
    active, standby = urls[0], urls[1]
    base = standby + "/v1/resources/"
    st, lease = http(base + "scrape/a/acquire", {"owner": "scrape", "ttl_ms": 60000})
    if st != 200:
        raise Failed("an acquire through a standby: %s %s" % (st, lease))
    st, _ = http(base + "scrape/a/acquire", {"owner": "other", "ttl_ms": 60000})
    if st != 409:
        raise Failed("a conflicting acquire: %s, not 409" % st)
    st, _ = http(base + "scrape/a/renew", {"lease_id": lease["lease_id"]})
    if st != 200:
        raise Failed("a renewal: %s" % st)
    # A renewal too late: its lease was released and another granted since.
    st, old = http(base + "scrape/b/acquire", {"owner": "late", "ttl_ms": 60000})
    http(base + "scrape/b/release", {"lease_id": old["lease_id"]})
    http(base + "scrape/b/acquire", {"owner": "next", "ttl_ms": 60000})
    st, _ = http(base + "scrape/b/renew", {"lease_id": old["lease_id"]})
    if st != 409:
        raise Failed("a late renewal: %s, not 409 lease_lost" % st)
    # A waiter that gets its turn: the acquire-wait histogram and the waiters gauge.
    st, _ = http(base + "scrape/a/acquire", {"owner": "waiter", "ttl_ms": 60000, "wait_ms": 300})
    st, _ = http(base + "scrape/a/release", {"lease_id": lease["lease_id"]})
    if st != 200:
        raise Failed("a release: %s" % st)


def main():
    mutexd = os.path.abspath(os.environ.get("MUTEXD_BIN", os.path.join(ROOT, "build", "mutexd")))
    prometheus = shutil.which("prometheus")
    if not prometheus:
        raise Failed("Debian's prometheus is not installed (scripts/deps.sh test installs it)")
    work = tempfile.mkdtemp(prefix="mutexd-scrape.")
    run = Run(work)
    try:
        t0 = time.time()
        subprocess.run([os.path.join(ROOT, "scripts", "azurite.sh"), "install"], check=True,
                       stdout=subprocess.DEVNULL)
        subprocess.run([os.path.join(ROOT, "scripts", "azurite.sh"), "start", run.az], check=True,
                       stdout=subprocess.DEVNULL)
        with open(os.path.join(run.az, "connection-string")) as f:
            cs = f.read().strip()
        ports = []
        while len(ports) < SERVERS:
            p = free_port()
            if p not in ports:
                ports.append(p)
        for i, port in enumerate(ports):
            run.start([mutexd, "--ha", "--advertise-url", "http://127.0.0.1:%d" % port,
                       "--listen", "127.0.0.1:%d" % port, "--mirror", "sync",
                       "--blob-connection-string", cs, "--blob-container", "scrape",
                       "--data-dir", os.path.join(work, "data-%d" % i)], "mutexd-%d.log" % i)
        urls = ["http://127.0.0.1:%d" % p for p in ports]

        def group():
            views = [http(u + "/v1/servers")[1] for u in urls]
            if all(v and v.get("active") for v in views) and len(
                    {v["active"]["url"] for v in views}) == 1 and all(
                    len(v["servers"]) == SERVERS for v in views):
                return views[0]["active"]["url"]
            return None
        active = wait_for("a group of %d with one active" % SERVERS, group, 60)
        urls.sort(key=lambda u: u != active)
        say("a group of %d on Azurite, %s active (%.1f s)" % (SERVERS, active, time.time() - t0))
        traffic(urls)

        pport = free_port()
        cfg = os.path.join(work, "prometheus.yml")
        with open(cfg, "w") as f:
            json.dump({"global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
                       "rule_files": [RULES],
                       "scrape_configs": [{"job_name": JOB, "static_configs": [
                           {"targets": ["127.0.0.1:%d" % p for p in ports]}]}]}, f)
        run.start([prometheus, "--config.file", cfg, "--storage.tsdb.path",
                   os.path.join(work, "prometheus-data"),
                   "--web.listen-address", "127.0.0.1:%d" % pport], "prometheus.log")
        api = "http://127.0.0.1:%d/api/v1/" % pport

        def get(path, **params):
            st, doc = http(api + path + ("?" + urllib.parse.urlencode(params, doseq=True)
                                         if params else ""), timeout=10)
            if st != 200 or doc.get("status") != "success":
                raise Failed("GET %s %s: %s %s" % (path, params, st, doc))
            return doc["data"]

        def all_up():
            targets = get("targets")["activeTargets"]
            return len(targets) == SERVERS and all(t["health"] == "up" for t in targets)
        wait_for("Prometheus scraping the %d servers" % SERVERS, all_up, 60)
        # A few scrapes, so that rates over 1m have two samples at least.
        time.sleep(4)
        say("Prometheus %s on 127.0.0.1:%d scrapes the %d servers" % (
            subprocess.run([prometheus, "--version"], capture_output=True, text=True)
            .stdout.split("\n")[0].split(" (")[0], pport, SERVERS))

        problems = []
        groups = get("rules")["groups"]
        loaded = {r["name"]: r for g in groups for r in g["rules"]}
        rules = rule_exprs()
        for name in rules:
            r = loaded.get(name)
            if r is None:
                problems.append("rule %s is not loaded" % name)
            elif r.get("health") != "ok":
                problems.append("rule %s: health %s (%s)" % (name, r.get("health"), r.get("lastError")))
        say("%d alert rules loaded, each evaluated without error" % len(rules))

        used = {}
        for name, expr in rules.items():
            for m in names_in(expr):
                used.setdefault(m, set()).add("rule " + name)
        dash = dashboard_exprs()
        for title, expr in dash:
            for m in names_in(expr):
                used.setdefault(m, set()).add("dashboard: " + title)
        if not any(n.startswith("mutexd_") for n in used):
            raise Failed("no metric name found in the rules and the dashboard")
        scraped = set(get("label/__name__/values"))
        for m in sorted(used):
            if not get("series", **{"match[]": m}):
                problems.append("%s, used by %s, is not in what was scraped" % (
                    m, ", ".join(sorted(used[m]))))
        if get("series", **{"match[]": CANARY}):
            problems.append("%s has series: the check cannot tell a missing metric" % CANARY)
        say("%d metric names used by the rules and the dashboard, checked against the %d "
            "names scraped; %s reported missing, as it must" % (
                len(used), len([n for n in scraped if n.startswith("mutexd_")]), CANARY))

        empty = 0
        for title, expr in dash:
            q = grafana_vars(expr)
            try:
                res = get("query", query=q)["result"]
            except Failed as exc:
                problems.append("dashboard %r: %s" % (title, exc))
                continue
            if not res:
                empty += 1
                problems.append("dashboard %r: %s returns nothing" % (title, q))
        say("%d dashboard queries run, %d without data" % (len(dash), empty))
        if problems:
            raise Failed("\n  ".join([""] + problems))
        say("passed in %.1f s" % (time.time() - t0))
        return 0
    except (Failed, subprocess.CalledProcessError) as exc:
        print("scrape: FAILED: %s" % exc, file=sys.stderr, flush=True)
        for log in ("prometheus.log", "mutexd-0.log"):
            t = run.tail(log)
            if t:
                print("--- %s\n%s" % (log, t), file=sys.stderr)
        return 1
    finally:
        run.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
