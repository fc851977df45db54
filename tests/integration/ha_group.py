"""A server group whose servers each reach Azurite through their own fault proxy
(faultproxy.py), with the load and the checks the fault tests and the nemesis share."""

import email.utils
import re
import select
import socket
import threading
import time
import urllib.parse
import uuid

import pytest

from faultproxy import FaultProxy
import history as lease_model
from ha_history import (PLACES, SETS, EventsReader, GroupClient, check_events, check_held,
                        check_ledger, check_tokens, explain_lost, lost_from_violations,
                        recorded, run_ledger, run_load, run_places, run_sets, to_ops)
from harness import BIN, Server, free_port

# Sanitizer builds are several times slower: the safety checks stay, the time bounds grow.
SLOW = 3.0 if ("asan" in BIN or "tsan" in BIN) else 1.0

FAKETIME_LIB = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1"


# The environment of a server whose wall clock is faked, all but the offset: the monotonic
# clock is left alone, and the offset read again at every call. libfaketime's "monotonic
# fix" for condition variables is turned off: with it, every timed wait on the monotonic
# clock went through it at a cost that kept an idle server busy (0.7 of a core for a
# server of 8 partitions, 1.3 for the active of a group of one; 0.01 without it).
FAKETIME_ENV = {"LD_PRELOAD": FAKETIME_LIB, "FAKETIME_DONT_FAKE_MONOTONIC": "1",
                "FAKETIME_NO_CACHE": "1", "FAKETIME_FORCE_MONOTONIC_FIX": "0"}


def faketime_env(offset):
    """The environment that runs a server with its wall clock `offset` ahead ("+5s")."""
    return dict(FAKETIME_ENV, FAKETIME=offset)


def skew_of(s):
    """How far server s's wall clock runs ahead of ours, from its Date header (s)."""
    c = s.client(timeout=5)
    try:
        r = c.request("GET", "/healthz")
    finally:
        c.close()
    return email.utils.parsedate_to_datetime(r.header("date")).timestamp() - time.time()


class Contest:
    """Holders renew leases of `ttl_ms` on `names`, then stop as a holder that keeps its
    work until its own deadline; contenders ask for the same names all along, each with
    one lease_id for every attempt (an acquire answered too late may have been granted,
    and its retry must find that lease). early() names every grant to a contender before
    its holder's deadline: the send time of the holder's last answered acquire or renew
    plus the TTL, less the 2 % a client keeps for its clock's drift."""

    def __init__(self, urls, names, ttl_ms, aliases=None):
        self.urls, self.names, self.ttl = urls, list(names), ttl_ms
        self.aliases = aliases
        self.last = {}  # resource -> (lease_id, token, send time of its last answer)
        self.grants = []  # (resource, recv time, token)
        self.answers = {}  # resource -> a contender's last answer (status, json)
        self.holding = threading.Event()
        self.contending = threading.Event()
        self.threads = []

    def _holder(self, i, res):
        c = GroupClient(self.urls, aliases=self.aliases)
        lid = str(uuid.uuid4())
        try:
            while not self.holding.is_set():
                send = time.monotonic()
                if res in self.last:
                    st, js = c.request("POST", "/v1/resources/%s/renew" % res,
                                       {"lease_id": lid}, deadline=send + 2)
                else:
                    st, js = c.request("POST", "/v1/resources/%s/acquire" % res,
                                       {"owner": "holder", "ttl_ms": self.ttl, "lease_id": lid},
                                       deadline=send + 2)
                if st == 200 and not self.holding.is_set():
                    self.last[res] = (lid, js["fencing_token"], send)
                self.holding.wait(0.3 + 0.7 * (i / len(self.names)))
        finally:
            c.close()

    def _contender(self, res):
        c = GroupClient(self.urls, timeout=2, aliases=self.aliases)
        lid = str(uuid.uuid4())
        try:
            while not self.contending.is_set():
                st, js = c.request("POST", "/v1/resources/%s/acquire" % res,
                                   {"owner": "contender", "ttl_ms": 30000, "lease_id": lid},
                                   deadline=time.monotonic() + 2)
                self.answers[res] = (st, js)
                if st == 200:
                    self.grants.append((res, time.monotonic(), js["fencing_token"]))
                    return
                time.sleep(0.05)
        finally:
            c.close()

    def _start(self, target, args):
        hs = [threading.Thread(target=target, args=a, daemon=True) for a in args]
        for t in hs:
            t.start()
        return hs

    def start(self):
        """Holders first, for 3 s; then contenders, which get nothing for 1 s."""
        self.holders = self._start(self._holder, list(enumerate(self.names)))
        time.sleep(3)
        assert len(self.last) == len(self.names), self.last
        self.contenders = self._start(self._contender, [(n,) for n in self.names])
        time.sleep(1)
        assert not self.grants, self.grants

    def stop_holders(self):
        self.holding.set()
        for t in self.holders:
            t.join(timeout=10)

    def wait(self, timeout):
        """Until every name went to a contender, or `timeout` s."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and len(self.grants) < len(self.names):
            time.sleep(0.1)
        self.contending.set()
        for t in self.contenders:
            t.join(timeout=10)

    def early(self, describe=lambda res: res):
        out = []
        for res, recv, tok in self.grants:
            lid, htok, send = self.last[res]
            d = send + self.ttl / 1000 - self.ttl / 50 / 1000
            if recv < d:
                out.append("%s: granted to another client (token %d) %.2f s before its "
                           "holder's deadline (token %d)" % (describe(res), tok, d - recv, htok))
        return out

    def ungranted(self):
        """The names no contender got, with its last answer."""
        got = {g[0] for g in self.grants}
        return {r: self.answers.get(r) for r in self.names if r not in got}


class PeerProxy:
    """A TCP relay in front of a server for its peers: the server advertises the relay's
    URL, so the other servers' probes and forwards go through it, while clients use the
    server's own port. cut() refuses every new connection and closes the open ones (a
    partition between the servers, the clients unaffected), heal() ends it.
    cut_probes() cuts only the other servers' health probes (requests for probe_path, each
    server's probes on a connection of their own): a connection that sends one is closed at
    once, the forwards pass; heal() ends that too."""

    def __init__(self, target_port, port=0, probe_path="/healthz"):
        self.target = target_port
        self.probe_line = ("GET %s " % probe_path).encode()
        self.probes_cut = False
        self.probing = set()  # the client sides of the connections that carried a probe
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", port))
        self.sock.listen(256)
        self.port = self.sock.getsockname()[1]
        self.url = "http://127.0.0.1:%d" % self.port
        self.open = set()
        self.lock = threading.Lock()
        self.is_cut = False
        self.closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def cut(self):
        with self.lock:
            self.is_cut = True
            conns, self.open = list(self.open), set()
        self._drop(conns)

    def cut_probes(self):
        with self.lock:
            self.probes_cut = True
            conns = list(self.probing)
        self._drop(conns)

    @staticmethod
    def _drop(conns):
        for c in conns:
            try:
                c.close()
            except OSError:
                pass

    def heal(self):
        self.is_cut = False
        self.probes_cut = False

    def close(self):
        self.closed = True
        self.cut()
        self.sock.close()

    def _accept(self):
        while not self.closed:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            if self.is_cut:
                c.close()
                continue
            threading.Thread(target=self._relay, args=(c,), daemon=True).start()

    def _relay(self, c):
        try:
            u = socket.create_connection(("127.0.0.1", self.target), timeout=2)
        except OSError:
            c.close()
            return
        with self.lock:
            self.open.update((c, u))
        try:
            while not self.is_cut:
                r, _, _ = select.select([c, u], [], [], 0.5)
                for s in r:
                    data = s.recv(65536)
                    if not data:
                        return
                    if s is c and data.startswith(self.probe_line):
                        # A request's first bytes come in a read of their own: the sender
                        # waits for each answer before the next request.
                        with self.lock:
                            self.probing.add(c)
                        if self.probes_cut:
                            return
                    (u if s is c else c).sendall(data)
        except (OSError, ValueError):
            pass
        finally:
            for s in (c, u):
                try:
                    s.close()
                except OSError:
                    pass
            with self.lock:
                self.open.discard(c)
                self.open.discard(u)
                self.probing.discard(c)


class ProxiedGroup:
    """n servers of one group on one container, server i through proxies[i]. With
    peers=True each server is reached by the others through a PeerProxy (peers[i]) that a
    test may cut; clients then use the servers' own URLs (client_urls(), aliases())."""

    def __init__(self, az, n=3, extra=(), envs=None, mirror="sync", ha=True, peers=False):
        self.az = az
        self.container = "f" + uuid.uuid4().hex[:20]
        self.extra = list(extra)
        self.partitions = int(self.extra[self.extra.index("--partitions") + 1]
                              if "--partitions" in self.extra else 1)
        self.mirror = mirror
        self.ha = ha
        self.envs = list(envs or [{}] * n)
        self.proxies = [FaultProxy(az) for _ in range(n)]
        self.ports = [free_port() for _ in range(n)]
        self.peers = [PeerProxy(p) for p in self.ports] if peers else None
        self.servers = [self.make(i) for i in range(n)]
        self.retired = []  # servers replaced by a restart: their logs stay readable
        self.loads = []  # stopped first by close()

    def make(self, i, port=None, data_dir=None):
        port = port or self.ports[i]
        url = self.peers[i].url if self.peers else "http://127.0.0.1:%d" % port
        args = ["--mirror", self.mirror, "--blob-connection-string",
                self.proxies[i].connection_string, "--blob-container", self.container]
        if self.ha:
            args = ["--ha", "--advertise-url", url] + args
        s = Server(listen="127.0.0.1:%d" % port, env=self.envs[i], data_dir=data_dir,
                   args=args + self.extra)
        s.url = url  # as advertised
        s.client_url = "http://127.0.0.1:%d" % port
        s.index = i
        return s

    def start(self, stagger=0.0):
        for s in self.servers:
            s.start()
            time.sleep(stagger)
        return self

    def restart(self, s, keep_dir=False, timeout=15):
        """Starts server s again on its address (after a kill), as a new process."""
        port = int(s.client_url.rsplit(":", 1)[1])
        again = self.make(s.index, port, data_dir=s.data_dir if keep_dir else None)
        self.servers[self.servers.index(s)] = again
        self.retired.append(s)
        again.start(timeout=timeout)
        return again

    def close(self):
        for l in self.loads:
            l.stop_event.set()
        # Every server is told at once: one by one, each would hand its partitions over to
        # the next to be stopped.
        live = [s for s in self.servers + self.retired if s.proc and s.proc.poll() is None]
        for s in live:
            try:
                s.proc.send_signal(18)  # SIGCONT: a stopped server cannot stop
            except OSError:
                pass
            s.terminate()
        for s in live:
            try:
                s.wait_stopped(timeout=20)
            except AssertionError:
                s.kill()
                s._cleanup()
        for p in self.proxies + (self.peers or []):
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
        """The URLs clients use: the servers' own."""
        return [s.client_url for s in self.servers]

    def aliases(self):
        """Advertised URL -> the URL clients use for it."""
        return {s.url: s.client_url for s in self.servers}

    def peer(self, s):
        return self.peers[s.index]

    def takeovers(self, s):
        """How many times server s (this process and the processes it re-executed as after
        being fenced) said it was serving as the active server."""
        return sum(1 for l in s.lines if "serving as the active server" in l)

    def get(self):
        c = GroupClient(self.urls(), aliases=self.aliases())

        def get(res):
            return c.request("GET", "/v1/resources/%s" % urllib.parse.quote(res, safe="/"),
                             deadline=time.monotonic() + 20)
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
                 ledger_pause=0.02, places=0, events=False, sets=0):
        """places: workers on semaphores and read/write resources (ha_history.place_worker);
        sets: workers on sets (ha_history.set_worker); events: a reader of the events feed
        (check_events)."""
        self.group = group
        self.resources = list(resources)
        self.stop_event = threading.Event()
        group.loads.append(self)
        urls, aliases = group.urls(), group.aliases()
        self.history, self.threads, self.finals = run_load(urls, resources, self.stop_event,
                                                           n=n, ttl_ms=ttl_ms, aliases=aliases)
        self.threads += run_ledger(urls, self.stop_event, self.history, n=ledgers,
                                   pause=ledger_pause)
        self.threads += run_places(urls, self.stop_event, self.history, n=places,
                                   aliases=aliases)
        self.threads += run_sets(urls, self.stop_event, self.history, n=sets, aliases=aliases,
                                 racers=sets > 0)
        self.reader = EventsReader(urls, self.stop_event, aliases=aliases) if events else None
        self.report = None  # the history checker's, after check()

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
        """Stops the load, reads every resource it used, and checks the whole history with
        the history checker (history.py), and the group's tokens, ledger and events feed:
        returns (violations, summary); the first violation, if any, is a line of figures."""
        self.stop()
        g = self.group
        reads = lease_model.Recorder()
        get = recorded(g.get(), reads)
        held = check_held(get, self.finals)
        toks = check_tokens(self.history, partitioned=g.partitions > 1)
        lbad, lost = check_ledger(self.history, get)
        for res in self.resources + sorted(PLACES) + SETS:
            get(res)
        began = time.monotonic()
        rep = self.report = lease_model.check(to_ops(self.history.events) + reads.ops)
        print("history check: %s in %.1f s" % (rep.summary(), time.monotonic() - began))
        events = []
        if self.reader:
            self.reader.finish()
            events = check_events(self.reader, self.history)
        statuses, by_kind = {}, {}
        for e in self.history.events:
            statuses[e["status"]] = statuses.get(e["status"], 0) + 1
            k = "%s %s" % (str(e["worker"]).rstrip("0123456789") or "w", e["op"])
            by_kind.setdefault(k, {})
            by_kind[k][e["status"]] = by_kind[k].get(e["status"], 0) + 1
        summary = "answers by status: %r; by worker and operation: %s" % (
            statuses, "; ".join("%s %r" % kv for kv in sorted(by_kind.items())))
        twice = [l for l in toks if l.startswith("token ")]
        went_back = [l for l in toks if "tokens went back" in l]
        n_twice = next((int(l.split()[0]) for l in toks if "more than once" in l), 0)
        n_back = next((int(l.split()[0]) for l in toks if "not above one answered" in l), 0)
        kinds = {}
        for k, _ in rep.violations:
            kinds[k] = kinds.get(k, 0) + 1
        bad = []
        if rep.violations or held or toks or lbad:
            bad.append("answered changes lost: %d ledger resources (of %d), %d held leases; "
                       "tokens handed out twice: %d; grants whose token went back: %d; "
                       "the history checker: %s"
                       % (len(lost), len([e for e in self.history.events
                                          if str(e["worker"]).startswith("ledger")
                                          and e["op"] == "acquire" and e["status"] == 200]),
                          len(held), n_twice, n_back,
                          ", ".join("%d %s" % (n, k) for k, n in sorted(kinds.items()))
                          or "consistent"))
        model = ["%s: %s" % v for v in rep.violations]
        for part in (lbad, held, twice, toks[-2:], went_back, model, events):
            bad += part[:12]
        if statuses.get(200, 0) < min_answered:
            bad.append("too little load: %r" % statuses)
        items = [(res, w[1] if w[0] == "held" else None) for res, w, _ in lost]
        items += [(res, None) for res in lost_from_violations(held)]
        items += [(t.split(": ", 1)[0], None) for k, t in rep.violations
                  if k in ("lost grant", "lost release")]
        if items:
            bad += explain_lost(g.az, g.container, items, proxies=g.proxies,
                                partitions=g.partitions)
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
