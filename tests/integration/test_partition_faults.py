"""The faults of test_ha_faults.py on a partitioned group (--partitions): real servers on a
real Azurite, each reaching it through its own fault proxy (faultproxy.py), so that a fault
hits one server and, through the partition's prefix in the container (`p/<ppp>/`), one
partition.

- A server whose wall clock runs 5 s ahead takes over the partitions of the one whose clock
  is right (and the other way round): no lease is granted to a contender before its
  holder's deadline as the holder saw it, and every lease goes to a contender afterwards.
- The takeover of one partition slowed past the owner lease (15 s): the server taking it
  keeps it, no other server takes it meanwhile, the other partitions are served throughout,
  and the load's history is clean.
- One failed blob request (a 503, then a reset) on a partition's journal append, on its
  owner-lease renewal and on the listing of every partition's owner blob, under load:
  nothing answered is lost, and no partition moves.
- A resource watch, a list watch and an events wait waiting at a server that leaves
  (SIGTERM) are answered 503 `partition_moved` with Retry-After; sent again to a survivor
  they see the next change.
- A server the others cannot probe for 60 s, while it reaches the blob store: each
  partition moves at most twice (away, and back after the cut).
- A server whose takeovers fail backs off and is given no partition meanwhile: the
  partitions of a dead server are served by the others.
"""

import re
import threading
import time

import pytest

import ha_history
from azure import Azurite
from ha_group import (SLOW, Contest, Load, faketime_env, groups,  # noqa: F401
                      skew_of, wait_log)
from test_partitions import owners, raw
from test_partitions import settled as partitions_settled

N = 4
PARTS = ["--partitions", str(N)]
FAST = ["--failover-grace-ms", "3000"]


@pytest.fixture(scope="module")
def azurite():
    a = Azurite()
    yield a
    a.stop()


def partition_of(name):
    return ha_history.partition_of(name, N)


def prefix(p):
    """A regex of partition p's prefix in the container, in a path or an escaped query."""
    return r"p(/|%%2F)%03d(/|%%2F)" % p


def settled(g, timeout=30):
    return partitions_settled(g, timeout, count=N)


def names_of(partitions, per=2, prefix="probe"):
    """`per` resource names in each of `partitions`."""
    out, i = [], 0
    want = {p: per for p in partitions}
    while any(want.values()):
        name = "%s-%d" % (prefix, i)
        p = partition_of(name)
        if want.get(p):
            out.append(name)
            want[p] -= 1
        i += 1
    return out


def generations(g, s):
    """Partition -> (owner URL, generation) in server s's map; None when s does not answer."""
    v = g.view(s, timeout=2)
    if not v or "partitions" not in v:
        return None
    return {o["partition"]: (o["url"], o["generation"]) for o in v["partitions"]["owners"]}


class MapWatch:
    """Polls the partition map of each live server every 50 ms: every change of a
    partition's owner or generation it saw (partition, from, to): a move, or a takeover by
    the same server."""

    def __init__(self, g):
        self.g = g
        self.seen = generations(g, g.alive()[0])
        self.moves = []
        self.stop_event = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        while not self.stop_event.is_set():
            for s in self.g.alive():
                now = generations(self.g, s) or {}
                for p, u in now.items():
                    if u[0] and u != self.seen.get(p):
                        self.moves.append((p, self.seen.get(p), u))
                        self.seen[p] = u
            time.sleep(0.05)

    def stop(self):
        self.stop_event.set()
        self.thread.join(timeout=10)
        return self.moves


# ---- 1. a server whose clock runs 5 s ahead ---------------------------------------------

@pytest.mark.heavy
@pytest.mark.parametrize("killed", ["right", "ahead"])
def test_a_clock_ahead_grants_nothing_before_the_holders_deadline(groups, killed):
    """Two servers of 4 partitions, the second 5 s ahead, each owning two. Holders renew
    leases of 10 s on resources of every partition, contenders ask for the same names; the
    holders stop and the server named `killed` is SIGKILLed: the other takes its partitions.
    No contender is granted a lease before its holder's deadline (its last answered send +
    the TTL), and every lease goes to a contender afterwards."""
    ttl = 10000
    g = groups(n=2, envs=[{}, faketime_env("+5s")], extra=PARTS)
    right, ahead = g.servers
    right.start()
    time.sleep(0.5)
    ahead.start()
    m = settled(g)
    skew = skew_of(ahead)
    assert 3.5 <= skew <= 6.5, "the second server's clock is %.2f s off, not 5 s" % skew
    assert sorted(sum(1 for p in m if m[p] == s.url) for s in g.servers) == [2, 2], m
    victim, survivor = (right, ahead) if killed == "right" else (ahead, right)

    contest = Contest(g.urls(), names_of(range(N), per=2, prefix="held"), ttl,
                      aliases=g.aliases())
    contest.start()
    contest.stop_holders()
    # The first journal append of one of the survivor's own partitions after the kill is
    # answered 2.5 s late: the grant it carries reaches its contender after the client's
    # 2-s timeout, and the contender's retry must find its own lease.
    late_p = next(p for p in range(N) if m[p] == survivor.url)
    late = g.proxy(survivor).add(action="delay", delay=2.5, method="PUT",
                                 path=r"/%sjournal/" % prefix(late_p), times=1)
    since = len(survivor.lines)
    victim.kill()
    deadline = time.monotonic() + 30 * SLOW
    while time.monotonic() < deadline:
        now = owners(g, survivor)
        if now and all(now[p] == survivor.url for p in range(N)):
            break
        time.sleep(0.1)
    took = [l for l in survivor.lines[since:] if "serving as the active server" in l]
    assert len(took) == 2, "the survivor did not take the victim's two partitions:\n" + \
        g.logs(30)
    contest.wait(ttl / 1000 + 15)
    early = contest.early(lambda res: "%s (partition %d, owned by the %s server before the "
                          "kill)" % (res, partition_of(res),
                                     "killed" if m[partition_of(res)] == victim.url
                                     else "surviving"))
    print("killed the %s server; skew %.2f s; grants %d of %d; early %d; late answers %d"
          % (killed, skew, len(contest.grants), len(contest.names), len(early), late.fired))
    assert not early, "\n".join(early)
    assert not contest.ungranted(), \
        "not every lease went to a contender after its deadline: %r\n%s" % (
            contest.ungranted(), g.logs(60))


# ---- 2. the takeover of one partition slower than the owner lease -----------------------

@pytest.mark.heavy
def test_a_slow_takeover_of_one_partition_keeps_it_and_the_others_are_served(groups):
    """Three servers of 4 partitions; the one owning two is SIGKILLed. Each request of the
    others to one of its partitions' snapshots and journal (not its lease) takes 4 s: that
    partition's takeover outlasts the owner lease (15 s). The server taking it keeps it, no
    other takes it meanwhile, and the resources of every other partition are answered
    throughout."""
    g = groups(3, extra=PARTS + FAST).start(stagger=0.3)
    m = settled(g)
    victim = next(s for s in g.servers if sum(1 for p in m if m[p] == s.url) == 2)
    slow_p, other_p = [p for p in range(N) if m[p] == victim.url]
    survivors = [s for s in g.servers if s is not victim]
    load = Load(g)
    assert load.wait_answered(300) >= 300
    rules = []
    for s in survivors:
        px = g.proxy(s)
        rules += [px.add(action="delay", delay=4.0, method="GET",
                         path=r"/%s(snapshots|journal)/" % prefix(slow_p), times=None),
                  px.add(action="delay", delay=4.0, method="GET",
                         query=r"prefix=%s" % prefix(slow_p), times=None),
                  px.add(action="delay", delay=4.0, method="PUT",
                         path=r"/%s(snapshots|journal)/" % prefix(slow_p), times=None)]

    # Acquire and release cycles on resources of each partition the survivors own, one
    # sent to each survivor: every one answered, none slow.
    probes = names_of([p for p in range(N) if m[p] != victim.url], per=len(survivors),
                      prefix="served")
    errors, samples, stop = [], [], threading.Event()

    def probe(res, s):
        body = {"owner": "probe", "ttl_ms": 5000}
        while not stop.is_set():
            t0 = time.monotonic()
            r = raw(s.client_url, "POST", "/v1/resources/%s/acquire" % res, body, timeout=10)
            if r.status == 200:
                r2 = raw(s.client_url, "POST", "/v1/resources/%s/release" % res,
                         {"lease_id": r.json["lease_id"]}, timeout=10)
                if r2.status != 200:
                    errors.append((res, "release", r2.status, r2.body[:200]))
            else:
                errors.append((res, "acquire", r.status, r.body[:200]))
            samples.append((t0, time.monotonic() - t0))
            time.sleep(0.05)

    threads = [threading.Thread(target=probe, args=(res, survivors[i % len(survivors)]),
                                daemon=True) for i, res in enumerate(probes)]
    for t in threads:
        t.start()
    since = {s: len(s.lines) for s in survivors}
    pattern = r"serving as the active server.* partition=%d " % slow_p
    t_kill = time.monotonic()
    victim.kill()
    try:
        taker = None
        deadline = time.monotonic() + 120 * SLOW
        while taker is None and time.monotonic() < deadline:
            taker = next((s for s in survivors if wait_log(s, pattern, 0, since[s])), None)
            time.sleep(0.1)
        t_took = time.monotonic()
        time.sleep(2)
    finally:
        for s in survivors:
            for r in rules:
                g.proxy(s).remove(r)
        stop.set()
        for t in threads:
            t.join(timeout=30)
    fired = sum(r.fired for r in rules)
    took = [l for s in survivors for l in s.lines[since[s]:] if re.search(pattern, l)]
    other = [l for s in survivors for l in s.lines[since[s]:]
             if re.search(r"serving as the active server.* partition=%d " % other_p, l)]
    during = sorted(lat for t0, lat in samples if t_kill <= t0 < t_took)
    print("partition %d: %r, after %.1f s; delayed requests: %d; partition %d: %r"
          % (slow_p, took, t_took - t_kill, fired, other_p, other))
    print("the other partitions' acquire+release during the slow takeover: %d cycles, the "
          "slowest %.2f s; errors: %d %r" % (len(during), during[-1] if during else 0,
                                             len(errors), errors[:3]))
    assert taker is not None, "the slow takeover did not complete:\n" + g.logs(30)
    assert fired >= 4, rules
    took_ms = int(re.search(r"took_ms=(\d+)", took[0]).group(1))
    assert took_ms > 15000, "the delays did not make the takeover outlast the owner lease " \
        "(%d ms): the test proves nothing" % took_ms
    assert len(took) == 1, "partition %d was taken more than once: %r" % (slow_p, took)
    assert len(other) == 1, other
    assert owners(g, taker)[slow_p] == taker.url
    assert not errors, "requests to the other partitions failed during the slow " \
        "takeover: %d, %r" % (len(errors), errors[:5])
    assert during and during[-1] < 2.0 * SLOW, during[-5:]
    load.wait_answered(load.answered() + 300, timeout=30)
    load.assert_ok()


# ---- 3. one failed blob request on a partition -----------------------------------------

@pytest.mark.heavy
def test_single_failed_blob_requests_of_a_partition_lose_nothing_and_move_nothing(groups):
    """Two servers of 4 partitions under load. On one partition of the first server its
    journal append, its owner-lease renewal, and (on each server) the listing of every
    partition's owner blob fail once with a 503, then once with a reset."""
    g = groups(2, extra=PARTS + FAST).start(stagger=0.3)
    m = settled(g)
    s = g.servers[0]
    p = next(q for q in range(N) if m[q] == s.url)
    load = Load(g, ledgers=8)
    assert load.wait_answered(300) >= 300
    watch = MapWatch(g)
    since = {t: len(t.lines) for t in g.servers}
    faults = [
        ("journal append", s, dict(method="PUT", path=r"/%sjournal/" % prefix(p),
                                   query=r"comp=appendblock")),
        ("owner lease renewal", s, dict(method="PUT", path=r"/%sowner$" % prefix(p),
                                        query=r"comp=lease",
                                        header=("x-ms-lease-action", "renew"))),
    ] + [("owner blob listing of server %d" % t.index, t,
          dict(method="GET", query=r"comp=list.*prefix=p(/|%2F)(&|$)")) for t in g.servers]
    seen = []
    try:
        for action in ("503", "reset"):
            for what, t, rule in faults:
                r = g.proxy(t).add(action=action, **rule)
                ok = g.proxy(t).wait_fired(r, timeout=30)
                g.proxy(t).remove(r)
                assert ok, (what, r)
                seen.append("%s %s: %r" % (action, what, r))
                before = load.answered()
                time.sleep(1.0)
                assert load.answered() > before, "the load stopped after the failed %s" % what
        # A move a failed request set off would be under way by now.
        time.sleep(3)
    finally:
        moves = watch.stop()
    print("\n".join(seen))
    taken = [l for t in g.servers for l in t.lines[since[t]:]
             if "serving as the active server" in l or "handed the partition over" in l]
    print("partition %d of %s; moves: %r" % (p, s.url, moves))
    assert not taken, "partitions changed hands: %r" % taken
    assert not moves, "a single failed blob request moved partitions: %r\n%s" % (
        moves, g.logs(pattern=r"level=(warn|error)|serving as|handing|handed"))
    assert settled(g) == m
    load.assert_ok()


# ---- 4. watches at a server that leaves -------------------------------------------------

def waiting(url, path):
    """GET `path` from `url` on a thread of its own, waiting there by the time this
    returns: (the thread, a list its answer goes to)."""
    answers = []

    def run():
        answers.append(raw(url, "GET", path))
    t = threading.Thread(target=run)
    t.start()
    time.sleep(0.5)
    assert not answers, answers[0].body
    return t, answers


def test_watches_at_a_server_that_leaves_are_told_the_partition_moved(groups):
    """A resource watch, a list watch and an events wait waiting at a server that leaves
    with SIGTERM are answered 503 `partition_moved` with Retry-After; sent again to a
    survivor with the same index (position), they are held, and answered with the next
    change."""
    g = groups(3, extra=PARTS).start(stagger=0.3)
    m = settled(g)
    victim = next(s for s in g.servers if any(m[p] == s.url for p in range(N)))
    mine = [p for p in range(N) if m[p] == victim.url]
    name, other = names_of([mine[0]], per=2, prefix="watched")
    a = raw(victim.client_url, "POST", "/v1/resources/%s/acquire" % name,
            {"owner": "first", "ttl_ms": 60000})
    assert a.status == 200, a.body
    index = raw(victim.client_url, "GET", "/v1/resources/%s" % name).json["index"]
    position = raw(victim.client_url, "GET", "/v1/resources?prefix=watched").json["index"]
    after = raw(victim.client_url, "GET", "/v1/events?prefix=watched").json["next"]
    assert isinstance(position, str) and isinstance(after, str), (position, after)
    wait = "wait_ms=20000"
    res_path = "/v1/resources/%s?index=%d&%s" % (name, index, wait)
    list_path = "/v1/resources?prefix=watched&index=%s&%s" % (position, wait)
    events_path = "/v1/events?prefix=watched&after=%s&%s" % (after, wait)
    t1, res_answer = waiting(victim.client_url, res_path)
    t2, list_answer = waiting(victim.client_url, list_path)
    t3, events_answer = waiting(victim.client_url, events_path)
    victim.stop(timeout=15)  # SIGTERM: its partitions are handed over, then it exits 0
    for t in (t1, t2, t3):
        t.join(timeout=30)
    for what, answers in (("resource watch", res_answer), ("list watch", list_answer),
                          ("events wait", events_answer)):
        assert answers, "the %s was not answered" % what
        r = answers[0]
        print("%s at the server that left: %d %s" % (what, r.status, r.body[:200]))
        assert r.status == 503, (what, r.status, r.body)
        assert r.json["error"]["reason"] == "partition_moved", (what, r.body)
        assert r.header("Retry-After"), (what, r.headers)

    # Sent again to a survivor: held until the next change, then answered with it.
    survivor = g.alive()[0]
    settled(g)
    t1, res_again = waiting(survivor.client_url, res_path)
    t2, list_again = waiting(survivor.client_url, list_path)
    t3, events_again = waiting(survivor.client_url, events_path)
    b = raw(survivor.client_url, "POST", "/v1/resources/%s/acquire" % other,
            {"owner": "second", "ttl_ms": 60000})
    assert b.status == 200, b.body
    t2.join(timeout=30)
    t3.join(timeout=30)
    assert events_again and events_again[0].status == 200, events_again
    assert [(e["type"], e["resource"]) for e in events_again[0].json["events"]] == [
        ("granted", other)], events_again[0].body
    assert list_again and list_again[0].status == 200, list_again
    listed = {x["resource"] for x in list_again[0].json["resources"]}
    assert listed == {name, other}, listed
    assert list_again[0].json["index"] != position
    time.sleep(0.5)
    assert not res_again, "the resource watch woke on another resource's change: %s" % (
        res_again[0].body)
    rel = raw(survivor.client_url, "POST", "/v1/resources/%s/release" % name,
              {"lease_id": a.json["lease_id"]})
    assert rel.status == 200, rel.body
    t1.join(timeout=30)
    assert res_again and res_again[0].status == 200, res_again
    assert res_again[0].json["state"] == "free" and res_again[0].json["index"] > index, \
        res_again[0].body


# ---- 5. a planned handover whose seal is slow ------------------------------------------

@pytest.mark.heavy  # timing: a 4 s seal against the 3 s failover, which a slow build blurs
def test_a_slow_handover_leaves_the_givers_other_partitions_served(groups):
    """One server owns the 4 partitions; a second joins and takes two. Every seal of a
    journal by the first (the last step of closing a partition it hands over) is answered
    4 s late: the partitions it keeps are answered throughout, never 503, as each handed-
    over partition closes on a thread of its own while the others are confirmed at every
    tick (closed on the loop's thread, the two closes stopped every confirmation for 8 s:
    --failover-after-ms is 3 s)."""
    g = groups(2, extra=PARTS)
    giver, joiner = g.servers
    giver.start()
    m = settled(g)
    assert all(m[p] == giver.url for p in range(N)), m
    seal = g.proxy(giver).add(action="delay", delay=4.0, method="PUT", query=r"comp=seal",
                              times=None)
    names = names_of(range(N), per=2, prefix="kept")
    answers = {p: [] for p in range(N)}  # (sent, status, body) of every request
    stop = threading.Event()

    def probe(res):
        body = {"owner": "probe", "ttl_ms": 5000}
        while not stop.is_set():
            t0 = time.monotonic()
            r = raw(giver.client_url, "POST", "/v1/resources/%s/acquire" % res, body, timeout=20)
            answers[partition_of(res)].append((t0, r.status, r.body[:200]))
            if r.status == 200:
                r = raw(giver.client_url, "POST", "/v1/resources/%s/release" % res,
                        {"lease_id": r.json["lease_id"]}, timeout=20)
                answers[partition_of(res)].append((t0, r.status, r.body[:200]))
            time.sleep(0.02)

    threads = [threading.Thread(target=probe, args=(res,), daemon=True) for res in names]
    for t in threads:
        t.start()
    since = len(giver.lines)
    t_join = time.monotonic()
    joiner.start()
    try:
        after = settled(g, timeout=60)
        handed = [l for l in giver.lines[since:] if "handed the partition over" in l]
        deadline = time.monotonic() + 30 * SLOW
        while len(handed) < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
            handed = [l for l in giver.lines[since:] if "handed the partition over" in l]
        time.sleep(1)
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=30)
        g.proxy(giver).remove(seal)
    kept = [p for p in range(N) if after[p] == giver.url]
    took = [int(re.search(r"took_ms=(\d+)", l).group(1)) for l in handed]
    refused = {p: [a for a in answers[p] if a[0] >= t_join and a[1] != 200] for p in kept}
    served = {p: sum(1 for a in answers[p] if a[0] >= t_join) for p in kept}
    print("kept %r, handed over %r in %r ms, seals delayed %d; after the join, requests to "
          "each kept partition %r, not 200: %r"
          % (kept, [p for p in range(N) if p not in kept], took, seal.fired, served,
             {p: len(v) for p, v in refused.items()}))
    assert len(kept) == 2 and len(handed) == 2, (after, handed)
    assert seal.fired >= 2 and all(t >= 3900 for t in took), (seal, took)
    assert all(served[p] >= 20 for p in kept), served
    assert not any(refused.values()), refused


# ---- a probe-only cut ------------------------------------------------------------------

class OwnerWatch:
    """Polls one server's partition map every 50 ms: every change of a partition's owner it
    saw (time, partition, from, to), each (url, generation). One server's view, so that two
    views at different moments are never taken for a move back; a new generation of the
    same owner is one takeover's (it names itself, then claims its generation), not a
    move."""

    def __init__(self, g, s):
        self.g, self.s = g, s
        self.seen = generations(g, s)
        self.moves = []
        self.stop_event = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        while not self.stop_event.is_set():
            for p, u in (generations(self.g, self.s) or {}).items():
                if u[0] and u[0] != (self.seen.get(p) or (None,))[0]:
                    self.moves.append((time.monotonic(), p, self.seen.get(p), u))
                    self.seen[p] = u
            time.sleep(0.05)

    def stop(self):
        self.stop_event.set()
        self.thread.join(timeout=10)
        return self.moves


@pytest.mark.heavy
def test_a_probe_only_cut_moves_each_partition_at_most_twice(groups):
    """A server the others cannot probe (nor forward to) for 60 s while it reaches the
    blob store and they reach it: they give it up and take its partitions once; it must
    not take them back while their probes of it fail (a peer stays gone while its probe
    fails, and a server whose lease a peer broke claims it again only as an orphan), and
    once the cut heals it gets its share back: each partition moves at most twice. Before,
    its share went back and forth every ~20 s for as long as the cut lasted."""
    g = groups(3, extra=PARTS, peers=True).start(stagger=0.3)
    m = settled(g)
    victim = next(s for s in g.servers if any(m[p] == s.url for p in range(N)))
    looker = next(s for s in g.servers if s is not victim)
    w = OwnerWatch(g, looker)
    t0 = time.monotonic()
    g.peer(victim).cut()
    time.sleep(60)
    g.peer(victim).heal()
    t1 = time.monotonic()
    settled(g, timeout=60)
    time.sleep(3)
    moves = w.stop()
    per = {p: [(round(t - t0, 1), a and a[0][-5:], b[0][-5:]) for t, q, a, b in moves if q == p]
           for p in range(N)}
    print("victim %s owned %r; cut for %.0f s; moves per partition: %r"
          % (victim.url, [p for p in range(N) if m[p] == victim.url], t1 - t0, per))
    during = [mv for mv in moves if mv[0] < t1]
    assert any(b[0] != victim.url for _, _, _, b in during), "the cut moved nothing"
    assert all(len(v) <= 2 for v in per.values()), per


# ---- a server whose takeovers fail -------------------------------------------------------

class Served:
    """Acquire+release cycles on one resource of each given partition, sent through server
    `via` (forwarded to the owner), every 0.2 s: the seconds in which each was served."""

    def __init__(self, via, names):
        self.ok = {n: set() for n in names}
        self.stop_event = threading.Event()
        self.threads = [threading.Thread(target=self._run, args=(via, n), daemon=True)
                        for n in names]
        self.t0 = time.monotonic()
        for t in self.threads:
            t.start()

    def _run(self, via, name):
        while not self.stop_event.is_set():
            try:
                r = raw(via, "POST", "/v1/resources/%s/acquire" % name,
                        {"owner": "served", "ttl_ms": 1000}, timeout=3)
                if r.status == 200:
                    raw(via, "POST", "/v1/resources/%s/release" % name,
                        {"lease_id": r.json["lease_id"]}, timeout=3)
                    self.ok[name].add(int(time.monotonic() - self.t0))
            except OSError:
                pass
            time.sleep(0.2)

    def stop(self):
        self.stop_event.set()
        for t in self.threads:
            t.join(timeout=10)

    def fraction(self, name, a, b):
        """Of the seconds [a, b) since the start, the fraction in which `name` was served."""
        return sum(1 for s in range(a, b) if s in self.ok[name]) / float(b - a)


# What a failing server's blob store refuses it: its snapshot writes, or its claims of a
# partition's owner lease (a 503 is not another server's lease: not a lost race).
REFUSED = {
    "snapshots": dict(method="PUT", path=r"/p/\d+/snapshots/"),
    "claims": dict(method="PUT", path=r"/p/\d+/owner$", query=r"comp=lease",
                   header=("x-ms-lease-action", "^acquire$")),
}
# The share of the seconds 12-40 after the kill each orphaned partition must be served in.
# Each try of the failing server after its backoff (10 s, then 20 s) takes the partition's
# placement for the time the takeover needs to fail, and the partition is not served
# meanwhile: on an idle machine 0.68 to 1.0 (snapshots) and 0.79 to 1.0 (claims) measured,
# against about 0.03 and 0.14 before the backoff and before a refused claim counted as a
# failure.
SERVED_AT_LEAST = {"snapshots": 0.6, "claims": 0.6}


@pytest.mark.heavy
@pytest.mark.parametrize("refused", sorted(REFUSED))
def test_a_server_whose_takeovers_fail_is_not_given_partitions_forever(groups, refused):
    """A server whose every takeover fails (its blob store refuses its snapshots, or its
    claims of the owner lease with 503) is the target of a partition a dead server owned:
    it must remember the failure and back off, and the others must take the partition
    meanwhile. Before, it claimed the partition again at every tick and nobody else took
    it: the partition was not served."""
    g = groups(3, extra=PARTS).start(stagger=0.3)
    m = settled(g)
    share = {s: [p for p in range(N) if m[p] == s.url] for s in g.servers}
    dead = next(s for s in g.servers if len(share[s]) == 2)
    failing, other = [s for s in g.servers if s is not dead]
    refuse = g.proxy(failing).add(action="503", times=None, **REFUSED[refused])
    names = names_of(share[dead], per=1, prefix="orphaned")
    since = len(failing.lines)
    dead.kill()
    served = Served(other.client_url, names)
    time.sleep(40)
    served.stop()
    tried = sum(1 for l in failing.lines[since:] if "could not take the partition" in l)
    fractions = {n: served.fraction(n, 12, 40) for n in names}
    print("partitions %r of the dead server: served in %r of the seconds 12-40 after the "
          "kill; the failing server's failed takeovers: %d (refused requests: %d)"
          % (share[dead], fractions, tried, refuse.fired))
    assert refuse.fired >= 1, "no takeover was tried by the failing server"
    assert all(f >= SERVED_AT_LEAST[refused] for f in fractions.values()), fractions
    assert tried <= 4, tried  # backed off: 10 s, then 20 s...


# ---- a join and a SIGTERM move what they must, at once -----------------------------------

class Gaps:
    """Acquire+release cycles on one resource of each partition, sent through server `via`,
    one after another: the times each cycle ended with both answered 200."""

    def __init__(self, via, names):
        self.done = {n: [] for n in names}
        self.stop_event = threading.Event()
        self.threads = [threading.Thread(target=self._run, args=(via, n), daemon=True)
                        for n in names]
        for t in self.threads:
            t.start()

    def _run(self, via, name):
        while not self.stop_event.is_set():
            try:
                r = raw(via, "POST", "/v1/resources/%s/acquire" % name,
                        {"owner": "gaps", "ttl_ms": 2000}, timeout=5)
                if r.status == 200 and raw(via, "POST", "/v1/resources/%s/release" % name,
                                           {"lease_id": r.json["lease_id"]},
                                           timeout=5).status == 200:
                    self.done[name].append(time.monotonic())
            except OSError:
                pass
            time.sleep(0.02)

    def stop(self):
        self.stop_event.set()
        for t in self.threads:
            t.join(timeout=10)

    def worst(self, name, a, b):
        """The longest time in [a, b] between two cycles of `name` (or an end)."""
        ts = [a] + [t for t in self.done[name] if a < t < b] + [b]
        return max(y - x for x, y in zip(ts, ts[1:]))


@pytest.mark.heavy
def test_a_sigterm_names_each_partitions_next_owner(groups):
    """A server of three that leaves with SIGTERM names, in each partition's owner blob as
    it releases it, the server placement gives it to: that server takes it at once, not
    once it has read that the leaver's heartbeat is gone (up to a second later, and then
    a tick more), so that the pause of each moved partition is its handover and its
    takeover only. The time from the release to the start of the takeover is printed: it
    is a tick or two of the taker, which on a loaded machine is much of a second."""
    g = groups(3, extra=PARTS).start(stagger=0.3)
    m = settled(g)
    victim = max(g.servers, key=lambda s: sum(1 for p in range(N) if m[p] == s.url))
    via = next(s for s in g.servers if s is not victim)
    names = names_of(range(N), per=1, prefix="paused")
    gaps = Gaps(via.client_url, names)
    time.sleep(3)
    t0, w0 = time.monotonic(), time.time()  # the log lines' times are wall-clock times
    victim.stop(timeout=15)
    time.sleep(8)
    gaps.stop()
    worst = {partition_of(n): round(gaps.worst(n, t0 - 0.5, t0 + 8), 2) for n in names}
    moved = [p for p in range(N) if m[p] == victim.url]
    # From the release (the end of the giver's "handed the partition over") to the start
    # of the taker's takeover (its "serving as the active server" less its took_ms).
    def at(line):
        t = line.split()[0][3:]
        return (time.mktime(time.strptime(t[:19], "%Y-%m-%dT%H:%M:%S")) +
                float("0." + t[20:23]))
    lag = {}
    for p in moved:
        rel = [l for l in victim.lines if "handed the partition over" in l and
               "partition=%d " % p in l]
        took = [l for s in g.alive() for l in s.lines
                if "serving as the active server" in l and "partition=%d " % p in l]
        if rel and took:
            ms = int(took[-1].split("took_ms=")[1].split()[0])
            lag[p] = round(at(took[-1]) - ms / 1000.0 - at(rel[-1]), 2)
    print("SIGTERM of the owner of %r: from release to takeover %r s; the longest gap per "
          "partition %r" % (moved, lag, worst))
    # Each moved partition went to the server the leaver named (before, none was named).
    named = {}
    for l in victim.lines:
        m2 = re.search(r"leaving: handing a partition over\" partition=(\d+) to=(\S+)", l)
        if m2:
            named[int(m2.group(1))] = m2.group(2)
    took_by = {p: next((s.url for s in g.alive() for l in s.lines
                        if "serving as the active server" in l and "partition=%d " % p in l
                        and at(l) > w0 - 1), None) for p in moved}
    print("named %r, taken by %r" % (named, took_by))
    assert len(lag) == len(moved), g.logs(30)
    assert named == took_by, (named, took_by)
    assert all(x <= 3 * SLOW for x in lag.values()), lag
    # No survivor gave a partition to the leaver, whose heartbeat was gone before it
    # released the first one: such a partition waits for an orphan's time (6 s).
    back = [l for s in g.alive() for l in s.lines
            if "handing a partition over" in l and "to=%s" % victim.url in l and at(l) > w0]
    assert not back, back
    # And each moved partition was served again within 2 s of the SIGTERM (0.8 s on an
    # idle machine: a handover and a takeover).
    assert all(worst[p] <= 2 * SLOW for p in moved), worst

