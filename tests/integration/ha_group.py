"""A server group whose servers each reach Azurite through their own fault proxy
(faultproxy.py), with the load and the checks the fault tests and the nemesis share."""

import re
import threading
import time
import uuid

import pytest

from faultproxy import FaultProxy
from ha_history import (GroupClient, check, check_ledger, check_tokens, explain_lost,
                        lost_from_violations, run_ledger, run_load)
from harness import BIN, Server, free_port

# Sanitizer builds are several times slower: the safety checks stay, the time bounds grow.
SLOW = 3.0 if ("asan" in BIN or "tsan" in BIN) else 1.0

FAKETIME_LIB = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1"


def faketime_env(offset):
    """The environment that runs a server with its wall clock `offset` ahead ("+5s")."""
    return {"LD_PRELOAD": FAKETIME_LIB, "FAKETIME": offset, "FAKETIME_DONT_FAKE_MONOTONIC": "1",
            "FAKETIME_NO_CACHE": "1"}


class ProxiedGroup:
    """n servers of one group on one container, server i through proxies[i]."""

    def __init__(self, az, n=3, extra=(), envs=None, mirror="sync", ha=True):
        self.az = az
        self.container = "f" + uuid.uuid4().hex[:20]
        self.extra = list(extra)
        self.mirror = mirror
        self.ha = ha
        self.envs = list(envs or [{}] * n)
        self.proxies = [FaultProxy(az) for _ in range(n)]
        self.servers = [self.make(i) for i in range(n)]
        self.retired = []  # servers replaced by a restart: their logs stay readable
        self.loads = []  # stopped first by close()

    def make(self, i, port=None, data_dir=None):
        port = port or free_port()
        url = "http://127.0.0.1:%d" % port
        args = ["--mirror", self.mirror, "--blob-connection-string",
                self.proxies[i].connection_string, "--blob-container", self.container]
        if self.ha:
            args = ["--ha", "--advertise-url", url] + args
        s = Server(listen="127.0.0.1:%d" % port, env=self.envs[i], data_dir=data_dir,
                   args=args + self.extra)
        s.url = url
        s.index = i
        return s

    def start(self, stagger=0.0):
        for s in self.servers:
            s.start()
            time.sleep(stagger)
        return self

    def restart(self, s, keep_dir=False, timeout=15):
        """Starts server s again on its address (after a kill), as a new process."""
        port = int(s.url.rsplit(":", 1)[1])
        again = self.make(s.index, port, data_dir=s.data_dir if keep_dir else None)
        self.servers[self.servers.index(s)] = again
        self.retired.append(s)
        again.start(timeout=timeout)
        return again

    def close(self):
        for l in self.loads:
            l.stop_event.set()
        for s in self.servers + self.retired:
            if s.proc and s.proc.poll() is None:
                try:
                    s.proc.send_signal(18)  # SIGCONT: a stopped server cannot stop
                except OSError:
                    pass
                try:
                    s.stop(timeout=20)
                except AssertionError:
                    s.kill()
                    s._cleanup()
        for p in self.proxies:
            p.close()

    def alive(self):
        return [s for s in self.servers if s.proc and s.proc.poll() is None]

    def proxy(self, s):
        return self.proxies[s.index]

    def view(self, s, timeout=5):
        c = s.client(timeout=timeout)
        try:
            r = c.request("GET", "/v1/servers")
            return r.json if r.status == 200 else None
        except OSError:
            return None
        finally:
            c.close()

    def active(self, timeout=20, among=None):
        """The server every live one (or those of `among`) names as active, once they agree."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            live = among or self.alive()
            views = [self.view(s, timeout=2) for s in live]
            urls = {v["active"]["url"] if v and v["active"] else None for v in views}
            roles = [v["self"]["role"] if v else None for v in views]
            if len(urls) == 1 and None not in urls and roles.count("active") == 1:
                url = urls.pop()
                return next(s for s in self.servers if s.url == url)
            time.sleep(0.1)
        raise AssertionError("no agreed active server: %r" % [self.view(s) for s in self.alive()])

    def standbys(self, active):
        return [s for s in self.alive() if s is not active]

    def urls(self):
        return [s.url for s in self.servers]

    def takeovers(self, s):
        """How many times server s (this process and the processes it re-executed as after
        being fenced) said it was serving as the active server."""
        return sum(1 for l in s.lines if "serving as the active server" in l)

    def get(self):
        c = GroupClient(self.urls())

        def get(res):
            return c.request("GET", "/v1/resources/%s" % res, deadline=time.monotonic() + 20)
        return get

    def logs(self, n=40, pattern=None):
        out = []
        for s in self.retired + self.servers:
            lines = [l for l in s.lines if not pattern or re.search(pattern, l)]
            out.append("---- %s (server %d, pid %s):\n%s" % (
                s.url, s.index, s.proc.pid if s.proc else None, "\n".join(lines[-n:])))
        return "\n".join(out)


RESOURCES = ["r%d" % i for i in range(24)]


class Load:
    """32 workers on shared resources (ha_history.worker) and 2 ledger workers."""

    def __init__(self, group, n=32, ttl_ms=4000, ledgers=2, resources=RESOURCES,
                 ledger_pause=0.02):
        self.group = group
        self.stop_event = threading.Event()
        group.loads.append(self)
        self.history, self.threads, self.finals = run_load(group.urls(), resources,
                                                           self.stop_event, n=n, ttl_ms=ttl_ms)
        self.threads += run_ledger(group.urls(), self.stop_event, self.history, n=ledgers,
                                   pause=ledger_pause)

    def answered(self):
        return sum(1 for e in self.history.events if e["status"] == 200)

    def wait_answered(self, n, timeout=60):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self.answered() < n:
            time.sleep(0.1)
        return self.answered()

    def stop(self):
        self.stop_event.set()
        for t in self.threads:
            t.join(timeout=60)

    def check(self, min_answered=100):
        """Stops the load and checks the history: returns (violations, summary); the first
        violation, if any, is a line of figures."""
        self.stop()
        g = self.group
        get = g.get()
        base = check(self.history, get, self.finals)
        toks = check_tokens(self.history)
        lbad, lost = check_ledger(self.history, get)
        statuses = {}
        for e in self.history.events:
            statuses[e["status"]] = statuses.get(e["status"], 0) + 1
        summary = "answers by status: %r" % statuses
        early = [l for l in base if "could have run out" in l]
        notheld = [l for l in base if "as its client saw it" in l]
        back = [l for l in base if "but not smaller" in l or "two leases with token" in l]
        twice = [l for l in toks if l.startswith("token ")]
        went_back = [l for l in toks if "tokens went back" in l]
        n_twice = next((int(l.split()[0]) for l in toks if "more than once" in l), 0)
        n_back = next((int(l.split()[0]) for l in toks if "not above one answered" in l), 0)
        bad = []
        if base or toks or lbad:
            bad.append("answered changes lost: %d ledger resources (of %d), %d held leases; "
                       "tokens handed out twice: %d; grants whose token went back: %d "
                       "(pairs on one resource: %d); grants before the previous holder's "
                       "deadline: %d"
                       % (len(lost), len([e for e in self.history.events
                                          if str(e["worker"]).startswith("ledger")
                                          and e["op"] == "acquire" and e["status"] == 200]),
                          len(notheld), n_twice, n_back, len(back), len(early)))
        for part in (lbad, notheld, twice, toks[-2:], went_back, back, early):
            bad += part[:12]
        if statuses.get(200, 0) < min_answered:
            bad.append("too little load: %r" % statuses)
        items = [(res, w[1] if w[0] == "held" else None) for res, w, _ in lost]
        items += [(res, None) for res in lost_from_violations(base)]
        if items:
            bad += explain_lost(g.az, g.container, items, proxies=g.proxies)
        return bad, summary

    def assert_ok(self, min_answered=100):
        bad, summary = self.check(min_answered)
        print(summary)
        if bad:
            print("\n".join(bad))
            print(self.group.logs(pattern=r"level=(warn|error)|serving as|sealed|restor|"
                                          r"role changed|fenced"))
        assert not bad, "\n".join(bad[:60])


def wait_log(s, pattern, timeout, since=0):
    """Waits until server s logs a line matching `pattern` (from line `since` on)."""
    deadline = time.monotonic() + timeout
    rx = re.compile(pattern)
    while True:
        for l in s.lines[since:]:
            if rx.search(l):
                return l
        if time.monotonic() >= deadline:
            return None
        time.sleep(0.01)


def metric(s, name):
    c = s.client(timeout=5)
    try:
        body = c.request("GET", "/metrics").body
    finally:
        c.close()
    m = re.search(r"^%s(?:\{[^}]*\})? (\S+)$" % re.escape(name), body, re.M)
    return float(m.group(1)) if m else None


@pytest.fixture
def groups(azurite):
    """Makes groups on the test module's `azurite`, and stops their servers and proxies
    whatever the test did. Import it into a test module that has an `azurite` fixture."""
    made = []

    def make(*a, **kw):
        g = ProxiedGroup(azurite, *a, **kw)
        made.append(g)
        return g
    yield make
    for g in made:
        g.close()
