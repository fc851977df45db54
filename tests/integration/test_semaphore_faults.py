"""Counting semaphores and shared (reader/writer) leases under faults (docs/api.md,
"Semaphores and shared leases"): many clients at once with short TTLs, SIGKILL and restart
on the same data directory, a server group's takeover, a restore from blob storage on a
wiped disk, and a data directory and a blob container written by the first release.

Real servers, real SQLite, real Azurite, real HTTP on loopback; everything is checked from
the clients' side: what they were answered, and when.

MX_SEED=<n> replays the random choices of the load test (the seed is printed)."""

import bisect
import datetime
import json
import os
import random
import shutil
import sqlite3
import tempfile
import threading
import time
import uuid

import pytest

from azure import Azurite
from ha_group import FAKETIME_LIB, SLOW, faketime_env, groups  # noqa: F401
from ha_history import GroupClient
from harness import ROOT, Client, Server
from test_mirror import mirror_args, readyz, wait_caught_up

V1 = os.path.join(ROOT, "tests", "fixtures", "v1")


@pytest.fixture(scope="module")
def azurite():
    a = Azurite()
    yield a
    a.stop()


@pytest.fixture
def data_dir():
    d = tempfile.mkdtemp(prefix="mutexd-semfault-")
    yield d
    shutil.rmtree(d, ignore_errors=True)


def timed(fn, *a, **kw):
    """(answer, send time, answer time) on the monotonic clock the server uses too."""
    sent = time.monotonic()
    r = fn(*a, **kw)
    return r, sent, time.monotonic()


def holders_of(g):
    """What GET shows of every holder that a restart, a restore or a takeover must keep."""
    return [(h["owner"], h["fencing_token"], h["shared"]) for h in g["holders"]]


def assert_lease(r, lease, limit, shared):
    """r: a 200 renew (or repeated acquire) of `lease`: the same token, limit and kind."""
    assert r.status == 200, (lease["owner"], r)
    assert r.json["fencing_token"] == lease["fencing_token"], (lease, r)
    assert r.json["limit"] == limit and r.json["shared"] is shared, r


# ---- 1. concurrency invariants under load ---------------------------------------------

SEMS = ["load/sem-a", "load/sem-b"]  # limit 3
RWS = ["load/rw-a", "load/rw-b"]  # shared readers, exclusive writers
LIMIT = 3
LOAD_SECONDS = 12.0
THREADS = 24
# The server rounds expires_in_ms up to the next millisecond: a deadline may be up to 1 ms
# before send + expires_in_ms. 2 ms is taken off every lease's certain end.
MARGIN = 0.002


class Lease:
    """One lease as its client saw it: when it was certainly held."""

    def __init__(self, resource, kind, body, sent, answered):
        self.resource, self.kind = resource, kind
        self.lease_id, self.token = body["lease_id"], body["fencing_token"]
        self.sent, self.answered = sent, answered
        self.segments = []  # (from, to): certainly held
        self.released_sent = None
        self.extend(body, sent, answered)

    def extend(self, body, sent, answered):
        """A 200 to the grant or a renewal sent at `sent`, answered at `answered`: the
        server did it at some time t in [sent, answered] and set the deadline to t plus
        expires_in_ms, so the lease is held for sure from `answered` to sent +
        expires_in_ms."""
        self.segments.append((answered, sent + body["expires_in_ms"] / 1000.0 - MARGIN))

    def sure_until(self):
        return max(e for _, e in self.segments)

    def held(self):
        """The union of the times it was certainly held, as disjoint (from, to) pairs."""
        cut = self.released_sent if self.released_sent is not None else float("inf")
        out = []
        for a, b in sorted(self.segments):
            b = min(b, cut)
            if b <= a:
                continue
            if out and a <= out[-1][1]:
                out[-1] = (out[-1][0], max(out[-1][1], b))
            else:
                out.append((a, b))
        return out


class LoadLog:
    def __init__(self):
        self.lock = threading.Lock()
        self.leases = []
        self.bad = []  # answers that break the contract on their own
        self.counts = {}

    def count(self, what):
        with self.lock:
            self.counts[what] = self.counts.get(what, 0) + 1

    def add(self, lease):
        with self.lock:
            self.leases.append(lease)

    def fail(self, line):
        with self.lock:
            self.bad.append(line)


def load_worker(server, i, seed, stop, log):
    rng = random.Random(seed * 1000 + i)
    c = server.client(timeout=15)
    owner = "w%d" % i
    try:
        while not stop.is_set():
            res = rng.choice(SEMS + RWS)
            if res in SEMS:
                kind, fields = "sem", {"limit": LIMIT}
            elif rng.random() < 0.5:
                kind, fields = "shared", {"shared": True}
            else:
                kind, fields = "exclusive", {}
            ttl = rng.choice([1000, 1500, 2000] if kind == "sem" else [1000, 1500])
            wait = rng.choice([0, 0, 300, 800, 1500])
            r, s, a = timed(c.acquire, res, owner=owner, ttl_ms=ttl, wait_ms=wait, **fields)
            if r.status == 409 and r.code == "lease_held":
                log.count("lease_held")
                time.sleep(rng.uniform(0.002, 0.03))
                continue
            if r.status != 200:
                log.fail("%s acquire %s (%s): %r" % (owner, res, kind, r))
                continue
            if (r.json["limit"], r.json["shared"]) != (
                    LIMIT if kind == "sem" else 1, kind == "shared"):
                log.fail("%s acquire %s (%s): answered as another kind: %r" % (owner, res, kind, r))
            lease = Lease(res, kind, r.json, s, a)
            log.add(lease)
            log.count("waited grant" if a - s > 0.05 and wait else "grant")
            if rng.random() < 0.1:
                log.count("abandoned")  # its holder stops renewing: it must run out
                continue
            if rng.random() < 0.7:
                hold_until = a + rng.uniform(0.0, 0.15)  # a short job
            else:
                hold_until = a + rng.uniform(0.5, 2.0) * ttl / 1000.0  # renewed on the way
            while True:
                left = hold_until - time.monotonic()
                if left <= 0:
                    break
                time.sleep(min(left, ttl / 3000.0))
                if time.monotonic() >= hold_until:
                    break
                r, s, a = timed(c.renew, res, lease.lease_id)
                if r.status == 200:
                    log.count("renewal")
                    if r.json["fencing_token"] != lease.token:
                        log.fail("%s renew %s changed the token %d to %d"
                                 % (owner, res, lease.token, r.json["fencing_token"]))
                    lease.extend(r.json, s, a)
                    continue
                if r.status == 409 and r.code == "lease_lost" and a > lease.sure_until():
                    log.count("lost (late renewal)")
                else:
                    log.fail("%s renew %s (token %d) answered %.3f s before its deadline: %r"
                             % (owner, res, lease.token, lease.sure_until() - a, r))
                lease = None
                break
            if lease is None:
                continue
            lease.released_sent = time.monotonic()
            r = c.release(res, lease.lease_id)
            if r.status == 200:
                log.count("release")
            elif r.status == 409 and r.code == "lease_lost" and \
                    time.monotonic() > lease.sure_until():
                log.count("lost (late release)")
            else:
                log.fail("%s release %s (token %d): %r" % (owner, res, lease.token, r))
    except Exception as e:  # noqa: BLE001 - a client that failed is a finding, not a crash
        log.fail("%s: %r" % (owner, e))
    finally:
        c.close()


def brief(holders):
    return ["%d%s" % (h["fencing_token"], " shared" if h["shared"] else "") for h in holders]


def sampler(server, stop, log):
    """GET every resource again and again: the server's own view keeps the rules too."""
    c = server.client(timeout=15)
    try:
        while not stop.is_set():
            for res in SEMS + RWS:
                g = c.get(res).json
                hs = g["holders"]
                if res in SEMS:
                    if hs and (g["limit"] != LIMIT or len(hs) > LIMIT or
                               any(h["shared"] for h in hs)):
                        log.fail("GET %s: limit %d, holders %s" % (res, g["limit"], brief(hs)))
                elif g["limit"] != 1 or (len(hs) > 1 and not all(h["shared"] for h in hs)):
                    log.fail("GET %s: limit %d, holders %s" % (res, g["limit"], brief(hs)))
            log.count("samples")
            time.sleep(0.01)
    finally:
        c.close()


def overlaps(leases, t0):
    """Sweeps the certain holding times of every resource: returns (violations, at most 5
    a resource, times from t0; the most leases certainly held at once per kind)."""
    bad, most = [], {}
    by_res = {}
    for l in leases:
        by_res.setdefault(l.resource, []).extend((a, b, l) for a, b in l.held())
    for res, segs in sorted(by_res.items()):
        events = []
        for a, b, l in segs:
            events.append((a, 1, l))
            events.append((b, 0, l))  # at one instant an end goes before a start
        events.sort(key=lambda e: (e[0], e[1]))
        active, found = [], []
        for t, start, l in events:
            if not start:
                active.remove(l)
                continue
            others = [o for o in active if o is not l]
            if l.kind == "sem" and len(others) + 1 > LIMIT:
                found.append("%s: %d leases held at once at +%.3f s, tokens %s" % (
                    res, len(others) + 1, t - t0, sorted(o.token for o in others + [l])))
            if l.kind != "sem":
                excl = [o for o in others if o.kind == "exclusive" or l.kind == "exclusive"]
                if excl:
                    found.append("%s: %s lease (token %d) held with %s at +%.3f s" % (
                        res, l.kind, l.token,
                        ["%s %d" % (o.kind, o.token) for o in excl], t - t0))
            active.append(l)
            n = len(set(id(o) for o in active))
            most[l.kind] = max(most.get(l.kind, 0), n)
        bad += found[:5] + (["%s: %d more" % (res, len(found) - 5)] if len(found) > 5 else [])
    return bad, most


def token_order(leases):
    """Each grant's token is above every token granted whose answer came before the
    grant's request was sent, and no token is handed out twice."""
    bad = []
    tokens = [l.token for l in leases]
    if len(set(tokens)) != len(tokens):
        seen = set()
        bad += ["token %d handed out twice" % t for t in tokens if t in seen or seen.add(t)]
    by_answer = sorted(leases, key=lambda l: l.answered)
    answers = [l.answered for l in by_answer]
    top, tops = 0, []
    for l in by_answer:
        top = max(top, l.token)
        tops.append(top)
    for l in leases:
        k = bisect.bisect_left(answers, l.sent)
        if k and tops[k - 1] >= l.token:
            bad.append("%s: token %d granted to a request sent after token %d was answered"
                       % (l.resource, l.token, tops[k - 1]))
    return bad


@pytest.mark.heavy
def test_semaphore_and_shared_leases_keep_their_limits_under_load(server):
    """24 clients for 12 s on two semaphores (limit 3) and two read/write resources, with
    TTLs of 1 to 2 s and waits of 0 to 1.5 s: they acquire (readers and writers half and
    half), hold for a short job (70%) or renew every third of the TTL for up to 2 TTLs, and
    release; or stop renewing at once (10% of the grants: those leases must run out).

    When a lease is held is known to its client only within bounds, and the check must
    never call a correct server wrong, so it uses, for every lease, only the times it was
    *certainly* held: the server granted (or renewed) at some instant t between the send
    and the answer, and set the deadline to t + expires_in_ms (rounded up to the ms, so
    1 ms is allowed for). So after a 200 sent at s and answered at a, the lease is held
    for sure during [a, s + expires_in_ms]. A renewal adds such a segment (between two
    segments there may be a gap: a late renewal of a lease that ran out, which the contract
    allows while nothing took its place). A release may end it as soon as it is sent: the
    certain time stops there.
    For a granted waiter s is the start of the wait, so its certain segment is short or
    empty: that loses detection, never adds a false alarm. The server and the test read the
    same monotonic clock (one machine). Then, at no instant:
    - are more than 3 leases of a semaphore certainly held;
    - is an exclusive lease certainly held with any other lease of its resource;
    and:
    - every grant's token is above every token granted whose answer came before the grant's
      request was sent (and no token twice);
    - a renewal (or release) answered while its lease was still certainly held is never
      lease_lost, and a renewal keeps the token;
    - GET, sampled all along, never shows more than 3 holders of a semaphore, nor an
      exclusive holder with another;
    - at the end, with the abandoned leases run out, every resource is free, with no waiter.
    The check must also have teeth: the semaphores were seen full (3 leases certainly held
    at once) and readers together, every kind was granted, leases were abandoned, and
    many grants came to waiters.

    About 15 s on 2 cores; a failure names its seed (MX_SEED replays the clients' choices,
    not the threads' interleaving)."""
    seed = int(os.environ.get("MX_SEED") or random.SystemRandom().randrange(1 << 30))
    print("MX_SEED=%d" % seed)
    stop = threading.Event()
    log = LoadLog()
    t0 = time.monotonic()
    threads = [threading.Thread(target=load_worker, args=(server, i, seed, stop, log))
               for i in range(THREADS)]
    threads.append(threading.Thread(target=sampler, args=(server, stop, log)))
    for t in threads:
        t.start()
    time.sleep(LOAD_SECONDS)
    stop.set()
    for t in threads:
        t.join(30)
    assert not any(t.is_alive() for t in threads), "a client is stuck (MX_SEED=%d)" % seed

    print("answers:", dict(sorted(log.counts.items())))
    bad, most = overlaps(log.leases, t0)
    bad += token_order(log.leases)
    print("most leases certainly held at once, by kind:", most)
    bad = bad[:20] + log.bad[:20]
    assert not bad, "MX_SEED=%d:\n%s" % (seed, "\n".join(bad))

    # The abandoned leases run out (TTL 2 s at most) and nothing is left behind.
    c = server.client()
    deadline = time.monotonic() + 2.5 * SLOW
    while True:
        gs = [c.get(res).json for res in SEMS + RWS]
        if all(g["state"] == "free" for g in gs) or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    c.close()
    assert all(g["state"] == "free" and g["waiters"] == 0 and g["holders"] == []
               for g in gs), gs

    # Enough happened for the checks to mean something.
    kinds = {}
    for l in log.leases:
        kinds[l.kind] = kinds.get(l.kind, 0) + 1
    print("grants by kind:", kinds)
    assert kinds.get("sem", 0) >= 40 and kinds.get("shared", 0) >= 15 and \
        kinds.get("exclusive", 0) >= 8, kinds
    assert len(log.leases) >= 100, (kinds, log.counts)
    assert log.counts.get("abandoned", 0) >= 5, log.counts
    assert log.counts.get("waited grant", 0) >= 40, log.counts
    assert log.counts.get("renewal", 0) >= 50, log.counts
    assert log.counts.get("samples", 0) >= 50, log.counts
    assert most.get("sem") == LIMIT, most
    assert most.get("shared", 0) >= 2 and most.get("exclusive") == 1, most


# ---- 2. SIGKILL and restart with a full semaphore --------------------------------------

def waiting_acquire(server, resource, **fields):
    """An acquire that waits, in a thread; returns (thread, outcome list)."""
    out = []

    def run():
        c = Client(server.host, server.port, timeout=60, retry=False)
        try:
            out.append(c.acquire(resource, **fields))
        except Exception as e:  # noqa: BLE001 - the server was killed under it
            out.append(e)
        finally:
            c.close()
    t = threading.Thread(target=run)
    t.start()
    return t, out


def wait_waiters(c, resource, n, timeout=5):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if c.get(resource).json["waiters"] == n:
            return
        time.sleep(0.01)
    raise AssertionError("%s: not %d waiters: %r" % (resource, n, c.get(resource).json))


def fill(c, ttl_ms=30000, pool="pool", doc="doc"):
    """A limit-3 semaphore with 3 holders and a resource with 2 readers: the leases, with
    when each was sent and answered."""
    sem, readers = [], []
    for i in range(3):
        r, s, a = timed(c.acquire, pool, owner="p%d" % i, ttl_ms=ttl_ms, limit=3)
        assert r.status == 200 and r.json["limit"] == 3, r
        sem.append(dict(r.json, sent=s, answered=a))
    for i in range(2):
        r, s, a = timed(c.acquire, doc, owner="r%d" % i, ttl_ms=ttl_ms, shared=True)
        assert r.status == 200 and r.json["shared"] is True, r
        readers.append(dict(r.json, sent=s, answered=a))
    return sem, readers


def test_sigkill_and_restart_keep_a_full_semaphore_and_its_readers(data_dir):
    """A semaphore (limit 3) full, a resource with 2 readers, a writer and a 4th worker
    queued behind them; SIGKILL; a new server on the same data directory. Every holder is
    there with its token, kind and remaining time (measured on the wall clock: no TTL comes
    back in full); the queued requests were never granted and are gone; each holder renews
    with its lease_id and keeps its token; the semaphore is still full (a 4th acquire is
    lease_held, an acquire naming another limit is limit_mismatch naming 3), the readers
    still keep a writer out, and new tokens are above every old one."""
    s = Server(data_dir=data_dir).start()
    c = s.client()
    sem, readers = fill(c)
    writer = waiting_acquire(s, "doc", owner="writer", ttl_ms=30000, wait_ms=20000)
    fourth = waiting_acquire(s, "pool", owner="p3", ttl_ms=30000, wait_ms=20000, limit=3)
    wait_waiters(c, "doc", 1)
    wait_waiters(c, "pool", 1)
    before = {res: c.get(res).json for res in ("pool", "doc")}
    assert len(before["pool"]["holders"]) == 3 and len(before["doc"]["holders"]) == 2, before
    top = max(l["fencing_token"] for l in sem + readers)
    c.close()
    s.kill()
    for t, out in (writer, fourth):
        t.join(10)
        # Killed while they waited: no answer, or a refusal, never a grant.
        assert out and (isinstance(out[0], Exception) or out[0].status != 200), out
    time.sleep(1.0)  # the wall clock runs while the server is down

    s = Server(data_dir=data_dir).start()
    c = s.client()
    for res, leases, limit, shared in (("pool", sem, 3, False), ("doc", readers, 1, True)):
        g, gs, ga = timed(c.get, res)
        g = g.json
        assert g["state"] == "held" and g["limit"] == limit and g["waiters"] == 0, g
        assert holders_of(g) == holders_of(before[res]), (before[res], g)
        assert holders_of(g) == [(l["owner"], l["fencing_token"], shared) for l in leases], g
        for h, l in zip(g["holders"], leases):
            # The deadline, set between send and answer, less the time to the GET; 100 ms
            # for the wall clock the deadline crossed the restart on.
            lo = (l["sent"] + 30.0 - ga) * 1000 - 100
            hi = (l["answered"] + 30.0 - gs) * 1000 + 100
            assert lo <= h["expires_in_ms"] <= hi, (h, lo, hi)
            assert h["ttl_ms"] == 30000, h
    # Each holder renews with its lease_id and keeps its token.
    for l in sem:
        assert_lease(c.renew("pool", l["lease_id"]), l, 3, False)
    for l in readers:
        assert_lease(c.renew("doc", l["lease_id"]), l, 1, True)
    # Still full, still under limit 3, still read-held.
    r = c.acquire("pool", owner="p4", limit=3)
    assert r.status == 409 and r.code == "lease_held", r
    for other in ({}, {"limit": 2}):
        r = c.acquire("pool", owner="p4", **other)
        assert r.status == 409 and r.code == "limit_mismatch" and \
            r.json["error"]["limit"] == 3, r
    r = c.acquire("doc", owner="writer2")
    assert r.status == 409 and r.code == "lease_held", r
    # A third reader joins; a released place goes to a new worker; both above every old token.
    r = c.acquire("doc", owner="r2", shared=True, ttl_ms=30000)
    assert r.status == 200 and r.json["fencing_token"] > top, r
    assert c.release("pool", sem[0]["lease_id"]).status == 200
    r2 = c.acquire("pool", owner="p4", limit=3, ttl_ms=30000)
    assert r2.status == 200 and r2.json["fencing_token"] > r.json["fencing_token"], r2
    assert [h["owner"] for h in c.get("pool").json["holders"]] == ["p1", "p2", "p4"]
    c.close()
    s.stop()


# ---- 3. a server group's takeover --------------------------------------------------------

def test_a_takeover_keeps_every_semaphore_and_shared_holder(groups):
    """Three servers of a group; through a standby, a semaphore filled (limit 3), two readers
    and a writer on another resource. SIGKILL of the active: once another server serves,
    every server's GET shows the same holders (owner, token, kind) and limits; each holder
    renews through any server (every one in turn) with its lease_id and keeps its token; the
    semaphore is still full and its limit still 3; new tokens are above every old one.
    A semaphore and two readers of 1 s, whose deadlines pass while no server is active, are
    kept for their holders (the failover grace): anyone else's acquire is lease_held, and
    each holder renews with its token."""
    g = groups(n=3).start()
    active = g.active()
    first = g.standbys(active)[0]
    c = first.client()
    sem, readers = fill(c, ttl_ms=60000)
    w = c.acquire("solo", owner="writer", ttl_ms=60000)
    assert w.status == 200 and w.json["shared"] is False, w
    w = w.json
    before = {res: c.get(res).json for res in ("pool", "doc", "solo")}
    # Leases of 1 s: they run out while no server is active, and are kept for their holders.
    short, shortdoc = fill(c, ttl_ms=1000, pool="short", doc="shortdoc")
    before.update({res: c.get(res).json for res in ("short", "shortdoc")})
    top = max(l["fencing_token"] for l in sem + readers + [w] + short + shortdoc)
    c.close()

    active.kill()
    killed = time.monotonic()
    gc = GroupClient([s.url for s in g.alive()])
    st, probe = gc.request("POST", "/v1/resources/probe/acquire",
                           {"owner": "probe", "ttl_ms": 60000}, deadline=time.monotonic() + 30)
    gc.close()
    assert st == 200, (st, probe, g.logs())
    assert probe["fencing_token"] > top, (probe, top)
    new = g.active()
    assert new is not active
    assert time.monotonic() - killed > 1.5, "the short leases did not run out"

    live = g.alive()
    # The leases that ran out during the takeover: kept for their holders alone.
    cs = live[0].client()
    for res, limit in (("short", 3), ("shortdoc", 1)):
        got = cs.get(res).json
        assert holders_of(got) == holders_of(before[res]), (before[res], got)
    r = cs.acquire("short", owner="p4", limit=3)
    assert r.status == 409 and r.code == "lease_held" and r.header("retry-after"), r
    r = cs.acquire("shortdoc", owner="writer2")
    assert r.status == 409 and r.code == "lease_held" and r.header("retry-after"), r
    for res, leases, limit, shared in (("short", short, 3, False),
                                       ("shortdoc", shortdoc, 1, True)):
        for l in leases:
            assert_lease(cs.renew(res, l["lease_id"]), l, limit, shared)
    cs.close()
    for s in live:
        cs = s.client()
        for res, limit in (("pool", 3), ("doc", 1), ("solo", 1)):
            got = cs.get(res).json
            assert got["state"] == "held" and got["limit"] == limit, (s.url, got)
            assert holders_of(got) == holders_of(before[res]), (s.url, before[res], got)
        cs.close()
    clients = [s.client() for s in live]
    for res, leases, limit, shared in (("pool", sem, 3, False), ("doc", readers, 1, True),
                                       ("solo", [w], 1, False)):
        for l in leases:
            for cs in clients:  # through every server, the active and the standbys
                assert_lease(cs.renew(res, l["lease_id"]), l, limit, shared)
    cs = clients[-1]
    r = cs.acquire("pool", owner="p4", limit=3)
    assert r.status == 409 and r.code == "lease_held", r
    r = cs.acquire("pool", owner="p4")
    assert r.status == 409 and r.code == "limit_mismatch" and r.json["error"]["limit"] == 3, r
    r = cs.acquire("doc", owner="writer2")
    assert r.status == 409 and r.code == "lease_held", r
    r = cs.acquire("doc", owner="r2", shared=True)
    assert r.status == 200 and r.json["fencing_token"] > probe["fencing_token"], r
    for cs in clients:
        cs.close()


# ---- 4. a restore from blob storage --------------------------------------------------------

@pytest.mark.parametrize("mode", ["async", "sync"])
def test_a_restore_brings_back_semaphore_and_shared_holders(azurite, data_dir, mode):
    """A server mirroring to Azurite holds a full semaphore (limit 3), two readers and a
    semaphore of limit 5 with 2 holders; it stops, its disk is lost, and a server on an empty
    data directory restores from the container: the same holders, kinds, tokens and limits,
    each with its whole TTL again (as test_mirror.py's restore expects). After an async
    mirror, which may lack the last changes, renewals and acquires are refused (503) during
    the restore grace, then work; after a sync mirror they work at once. Then the
    semaphore is still full, its limit 3, and new tokens are above every old one."""
    name = "s" + uuid.uuid4().hex[:20]
    with Server(data_dir=data_dir, args=mirror_args(azurite, name, mode)) as s:
        c = s.client()
        sem, readers = fill(c, ttl_ms=60000)
        five = [c.acquire("five", owner="f%d" % i, limit=5, ttl_ms=60000).json
                for i in range(2)]
        gone = c.acquire("pool2", owner="x", limit=2, ttl_ms=60000).json
        assert c.release("pool2", gone["lease_id"]).status == 200
        before = {res: c.get(res).json for res in ("pool", "doc", "five")}
        top = max(l["fencing_token"] for l in sem + readers + five + [gone])
        assert wait_caught_up(c)
        c.close()
    stopped_at = time.monotonic()
    shutil.rmtree(data_dir)

    with Server(data_dir=data_dir, args=mirror_args(azurite, name, mode,
                                                    "--restore-grace-ms", "3000")) as s:
        c = s.client()
        assert any("mirror: restored" in l for l in s.lines), s.log()
        elapsed_ms = (time.monotonic() - stopped_at) * 1000
        for res, limit in (("pool", 3), ("doc", 1), ("five", 5)):
            g = c.get(res).json
            assert g["state"] == "held" and g["limit"] == limit, g
            assert holders_of(g) == holders_of(before[res]), (before[res], g)
            for h in g["holders"]:
                assert 60000 - elapsed_ms - 200 <= h["expires_in_ms"] <= 62000, (h, elapsed_ms)
        assert c.get("pool2").json["state"] == "free"
        rn = c.renew("pool", sem[0]["lease_id"])
        r = c.acquire("doc", owner="r2", shared=True)
        if mode == "async":
            assert rn.status == 503 and rn.code == "unavailable", rn
            assert r.status == 503 and r.code == "unavailable", r
            assert "grace" in readyz(c).json["reason"]
            time.sleep(3.1)
            rn = c.renew("pool", sem[0]["lease_id"])
            r = c.acquire("doc", owner="r2", shared=True)
        assert_lease(rn, sem[0], 3, False)
        assert r.status == 200 and r.json["fencing_token"] > top, r
        for l in sem[1:]:
            assert_lease(c.renew("pool", l["lease_id"]), l, 3, False)
        for l in readers:
            assert_lease(c.renew("doc", l["lease_id"]), l, 1, True)
        for l in five:
            assert_lease(c.renew("five", l["lease_id"]), l, 5, False)
        r = c.acquire("pool", owner="p4", limit=3)
        assert r.status == 409 and r.code == "lease_held", r
        r = c.acquire("pool", owner="p4")
        assert r.status == 409 and r.code == "limit_mismatch" and r.json["error"]["limit"] == 3, r
        r = c.acquire("doc", owner="writer")
        assert r.status == 409 and r.code == "lease_held", r
        r = c.acquire("five", owner="f2", limit=5)
        assert r.status == 200 and r.json["fencing_token"] > top, r
        assert readyz(c).status == 200
        c.close()


# ---- 5. what the first release (0.1.0) wrote -----------------------------------------------

V1_HELD = "6ccb3e43-0489-4885-ac1c-bf894cffbd13"
V1_EXPIRED = "0b0c2a6e-5f1d-4a4e-9d3b-2a1f0c9e8d71"
V1_META = "9a7e54d2-3c21-4f0b-8e6a-5d4c3b2a1f00"
V1_GONE = "2a3b4c5d-6e7f-4081-92a3-b4c5d6e7f809"  # the journal's mirror/gone
V1_REGRANT = "3b4c5d6e-7f80-4192-a3b4-c5d6e7f8091a"  # the journal's mirror/expired
V1_METADATA = {"addr": "10.0.0.1:80", "n": [1, 2.5, None], "big": 9007199254740993}


def v1_rows():
    db = sqlite3.connect("file:%s?mode=ro&immutable=1" % os.path.join(V1, "mutexd.db"), uri=True)
    rows = {r[0]: r for r in db.execute(
        "SELECT resource, token, ttl_ms, renewed_at, deadline, held FROM leases")}
    meta = dict(db.execute("SELECT key, value FROM meta"))
    db.close()
    return rows, meta


def v1_clock(ms):
    """libfaketime's absolute start time for the wall clock `ms` (ms since the epoch, UTC)."""
    return "@" + datetime.datetime.fromtimestamp(
        ms / 1000.0, datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S")


def assert_v1_plain(g, owner, token):
    assert g["state"] == "held" and g["limit"] == 1, g
    assert [(h["owner"], h["fencing_token"], h["shared"]) for h in g["holders"]] == [
        (owner, token, False)], g
    assert g["holder"] == g["holders"][0], g


# Heavy, as the other tests that set a server's clock: libfaketime's preload cannot run
# under the sanitizer builds, whose runtime must come first.
@pytest.mark.heavy
@pytest.mark.skipif(not os.path.exists(FAKETIME_LIB), reason="libfaketime is not installed")
def test_a_data_directory_of_0_1_0_is_served(data_dir):
    """The new server on a copy of the 0.1.0 data directory (schema 1, tests/fixtures/v1).
    Its leases were written with deadlines on the wall clock of the day the fixture was
    made, so the server runs with its wall clock set (libfaketime) to one minute after the
    last renewal there: fixture/held and fixture/meta are held, as exclusive leases (limit
    1, shared false), with about 59 minutes left; their holders renew with their lease_id
    and keep their tokens; fixture/expired ran out and its holder may still renew it
    (nothing was granted since); fixture/gone is free. The index and the tokens continue
    above the old ones, a semaphore and readers can be made on the upgraded store, and
    everything is there again after a restart. Then, on another copy and the real wall
    clock (where those leases may have run out long ago), the server starts, answers GET,
    and continues the tokens and the index as well."""
    rows, meta = v1_rows()
    start_ms = rows["fixture/held"][3] + 60000
    shutil.copy(os.path.join(V1, "mutexd.db"), os.path.join(data_dir, "mutexd.db"))
    env = dict(faketime_env(v1_clock(start_ms)), TZ="UTC")
    s = Server(data_dir=data_dir, env=env).start()
    c = s.client()
    g = c.get("fixture/held").json
    assert_v1_plain(g, "worker-1", 1)
    left = rows["fixture/held"][4] - start_ms
    assert left - 5000 <= g["holders"][0]["expires_in_ms"] <= left + 1000, (g, left)
    m = c.get("fixture/meta").json
    assert_v1_plain(m, 'host "a" é', 3)
    assert m["holders"][0]["metadata"] == V1_METADATA, m
    assert c.get("fixture/expired").json["state"] == "free"
    assert c.get("fixture/gone").json["state"] == "free"
    for res, lid, token in (("fixture/held", V1_HELD, 1), ("fixture/meta", V1_META, 3),
                            ("fixture/expired", V1_EXPIRED, 2)):
        assert_lease(c.renew(res, lid), {"owner": res, "fencing_token": token}, 1, False)
    # A stranger is refused, also as a reader: an exclusive lease holds alone.
    for fields in ({}, {"shared": True}):
        r = c.acquire("fixture/held", owner="x", **fields)
        assert r.status == 409 and r.code == "lease_held", r
    r = c.acquire("fixture/gone", owner="n", ttl_ms=60000)
    assert r.status == 200 and r.json["fencing_token"] > meta["token_hwm"], r
    assert c.get("fixture/gone").json["index"] > meta["index_hwm"]
    top = r.json["fencing_token"]
    sem = [c.acquire("new/sem", owner="s%d" % i, limit=3, ttl_ms=60000) for i in range(3)]
    assert [x.status for x in sem] == [200] * 3, sem
    rd = [c.acquire("new/doc", owner="r%d" % i, shared=True, ttl_ms=60000) for i in range(2)]
    assert [x.status for x in rd] == [200] * 2, rd
    assert c.acquire("new/sem", owner="s3", limit=3).code == "lease_held"
    c.close()
    s.kill()
    s = Server(data_dir=data_dir, env=env).start()
    c = s.client()
    assert_v1_plain(c.get("fixture/held").json, "worker-1", 1)
    assert len(c.get("new/sem").json["holders"]) == 3
    assert [h["shared"] for h in c.get("new/doc").json["holders"]] == [True, True]
    r = c.acquire("another", owner="n")
    assert r.status == 200 and r.json["fencing_token"] > top + 5, r
    c.close()
    s.stop()

    # The real wall clock: whatever ran out, the server serves and continues.
    d2 = tempfile.mkdtemp(prefix="mutexd-semfault-")
    try:
        shutil.copy(os.path.join(V1, "mutexd.db"), os.path.join(d2, "mutexd.db"))
        with Server(data_dir=d2) as s:
            c = s.client()
            g = c.get("fixture/held").json
            if time.time() * 1000 < rows["fixture/held"][4] - 1000:
                assert_v1_plain(g, "worker-1", 1)
            elif time.time() * 1000 > rows["fixture/held"][4] + 1000:
                assert g["state"] == "free", g
            assert c.get("fixture/expired").json["state"] == "free"
            r = c.acquire("fixture/gone", owner="n")
            assert r.status == 200 and r.json["fencing_token"] > meta["token_hwm"], r
            assert c.get("fixture/gone").json["index"] > meta["index_hwm"]
            c.close()
    finally:
        shutil.rmtree(d2, ignore_errors=True)


def put_blob(az, container, name, body=b"", kind="BlockBlob", meta=None):
    hdrs = {"x-ms-blob-type": kind}
    hdrs.update({"x-ms-meta-%s" % k: v for k, v in (meta or {}).items()})
    st, _, out = az.request("PUT", "%s/%s" % (container, name), headers=hdrs,
                            body=body if kind == "BlockBlob" else b"")
    assert st == 201, (st, name, out[:300])
    if kind == "AppendBlob" and body:
        st, _, out = az.request("PUT", "%s/%s" % (container, name), {"comp": "appendblock"},
                                body=body)
        assert st == 201, (st, name, out[:300])


def test_a_container_of_0_1_0_is_restored(azurite, data_dir):
    """The 0.1.0 snapshot and the journal blob after it (tests/fixtures/v1), put in a fresh
    container under the names that release gave them (snapshots/<generation>-<seq>.jsonl,
    journal/<generation>/<first-seq>, an append blob) with the owner blob naming them (no
    lease on it: that server stopped cleanly). A new server with an empty data directory
    restores from it (sync: no grace): the journal's changes are applied over the snapshot
    (mirror/held released, mirror/gone and mirror/expired granted again); every lease is
    an exclusive one (limit 1, shared false) with its token, renewed by its lease_id; the
    new tokens continue above the reservation that release made (100000)."""
    name = "v" + uuid.uuid4().hex[:20]
    snap = "snapshots/0000000001-00000000000000000006.jsonl"
    journal = "journal/0000000001/00000000000000000007"
    st, _, out = azurite.request("PUT", name, {"restype": "container"})
    assert st == 201, (st, out[:300])
    put_blob(azurite, name, snap, open(os.path.join(V1, "snapshot.jsonl"), "rb").read())
    put_blob(azurite, name, journal, open(os.path.join(V1, "journal.jsonl"), "rb").read(),
             kind="AppendBlob")
    header = json.loads(open(os.path.join(V1, "snapshot.jsonl")).readline())
    put_blob(azurite, name, "owner", meta={"generation": "1", "journal": journal,
                                           "since": "1795635849590", "snapshot": snap,
                                           "url": "-"})
    with Server(data_dir=data_dir, args=mirror_args(azurite, name, "sync")) as s:
        assert any("mirror: restored" in l for l in s.lines), s.log()
        c = s.client()
        assert c.get("mirror/held").json["state"] == "free"
        expect = {"mirror/meta": ('host "a" é', 3, V1_META),
                  "mirror/gone": ("worker-5", 5, V1_GONE),
                  "mirror/expired": ("worker-6", 6, V1_REGRANT)}
        for res, (owner, token, lid) in sorted(expect.items()):
            g = c.get(res).json
            assert_v1_plain(g, owner, token)
            assert_lease(c.renew(res, lid), {"owner": owner, "fencing_token": token}, 1, False)
        assert c.get("mirror/meta").json["holder"]["metadata"] == V1_METADATA
        assert c.renew("mirror/held", V1_HELD).code == "lease_lost"
        r = c.acquire("mirror/held", owner="n", limit=3)
        assert r.status == 200 and r.json["fencing_token"] > header["ceiling"], r
        assert c.get("mirror/held").json["index"] > 11
        assert readyz(c).status == 200
        c.close()
