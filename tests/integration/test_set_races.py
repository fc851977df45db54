"""Sets racing on the resources they share, on a server with eight worker threads: two
sets naming the same two resources in opposite orders, sent at the same moment, the first
holder releasing one resource and only later the other; and three sets chained round
three resources, released one resource at a time in a random order. Judged from the
clients' side (no set granted while a resource it names is still held by another), by
GET (never two exclusive holders) and by /metrics (no waiter left once nobody waits).

Every round uses names of its own and several rounds run at once, so that the parts of
concurrent sets meet in every order on the actors' threads. The seed is printed."""

import os
import random
import re
import threading
import time

from harness import Server

PAD = 20
SEED = int(os.environ.get("MUTEXD_TEST_SEED", random.randrange(1 << 30)))


def acquire_many(c, names, owner, **fields):
    fields.update(resources=names, owner=owner)
    return c.request("POST", "/v1/acquire", fields)


def holders(c, name):
    r = c.get(name)
    assert r.status == 200, r
    return r.json["holders"]


def waiters_metric(c):
    r = c.request("GET", "/metrics")
    assert r.status == 200, r
    m = re.search(r"^mutexd_waiters(?:\{[^}]*\})? (\S+)$", r.body, re.M)
    assert m, "no mutexd_waiters in /metrics"
    return float(m.group(1))


def wait_metric_zero(c, timeout=10):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = waiters_metric(c)
        if v == 0:
            return
        time.sleep(0.05)
    raise AssertionError("mutexd_waiters is %s with nobody waiting" % v)


def run_threads(fns):
    errors = []

    def wrap(fn):
        try:
            fn()
        except BaseException as e:  # noqa: B902: reported below, with the seed
            errors.append(e)
    ts = [threading.Thread(target=wrap, args=(fn,)) for fn in fns]
    for t in ts:
        t.start()
    for t in ts:
        t.join(60)
    assert not any(t.is_alive() for t in ts), "a request was never answered (seed %d)" % SEED
    if errors:
        raise errors[0]


def two_sets_round(server, tag, rng):
    """[b, a] and [a, b] at once; the first granted releases b, then a."""
    a, b = "race/%s/a" % tag, "race/%s/b" % tag
    go = threading.Barrier(2)
    got = {}
    # Names of each set's own between the two shared ones widen the moment in which the
    # other set's parts can pass: the parts of a set are not sent all at once.
    pad = ["race/%s/%s%d" % (tag, w, i) for w in "xy" for i in range(PAD)]
    orders = {"x": [b] + pad[:PAD] + [a], "y": [a] + pad[PAD:] + [b]}

    def one(who):
        c = server.client()
        try:
            go.wait()
            r = acquire_many(c, orders[who], who, ttl_ms=30000, wait_ms=20000)
            got[who] = (time.monotonic(), r)
        finally:
            c.close()
    ts = [threading.Thread(target=one, args=(w,)) for w in orders]
    for t in ts:
        t.start()
    c = server.client()
    try:
        deadline = time.monotonic() + 20
        while not got and time.monotonic() < deadline:
            time.sleep(0.002)
        assert got, "neither set was answered (seed %d)" % SEED
        first = next(iter(got))
        second = "y" if first == "x" else "x"
        r1 = got[first][1]
        assert r1.status == 200, r1
        lid = r1.json["leases"][0]["lease_id"]
        r = c.release(b, lid)
        assert r.status == 200, r
        # a is still the first set's: the second may not be granted, however long it waits.
        time.sleep(rng.choice([0, 0.005, 0.02]))
        hs = holders(c, a)
        assert len(hs) == 1 and hs[0]["owner"] == first, \
            "two holders of %s after the release of %s alone: %s (seed %d)" % (a, b, hs, SEED)
        assert second not in got, "the second set was granted while %s was held: %s (seed %d)" % (
            a, got[second][1], SEED)
        released_at = time.monotonic()
        r = c.request("POST", "/v1/release", {"resources": [n for n in orders[first] if n != b],
                                                "lease_id": lid})
        assert r.status == 200, r
        for t in ts:
            t.join(20)
        assert second in got, "the second set was never answered (seed %d)" % SEED
        at, r2 = got[second]
        assert r2.status == 200, r2
        assert at >= released_at
        toks = {l["resource"]: l["fencing_token"] for l in r2.json["leases"]}
        first_toks = {l["resource"]: l["fencing_token"] for l in r1.json["leases"]}
        assert all(toks[n] > first_toks[n] for n in (a, b)), (toks, first_toks)
        for n in (a, b):
            hs = holders(c, n)
            assert len(hs) == 1 and hs[0]["owner"] == second, (n, hs)
        r = c.request("POST", "/v1/release",
                      {"resources": orders[second], "lease_id": r2.json["leases"][0]["lease_id"]})
        assert r.status == 200, r
    finally:
        c.close()


def test_two_sets_in_opposite_orders_never_share_a_resource():
    rng = random.Random(SEED)
    print("seed", SEED)
    with Server(args=["--threads", "8"]) as s:
        for rnd in range(40):
            run_threads([lambda k=k: two_sets_round(s, "%d-%d" % (rnd, k), rng)
                         for k in range(6)])
        c = s.client()
        wait_metric_zero(c)
        c.close()


def three_sets_round(server, tag, rng):
    """[a, b], [b, c], [c, a] at once; each granted set releases its resources one at a
    time, in a random order, after a short hold; some wait little and time out."""
    names = ["race3/%s/%s" % (tag, x) for x in "abc"]
    sets = [[names[0], names[1]], [names[1], names[2]], [names[2], names[0]]]
    go = threading.Barrier(3)
    holding = {}  # resource -> who holds it, as the clients were answered
    lock = threading.Lock()
    seeds = [rng.randrange(1 << 30) for _ in sets]

    def one(i):
        r_ = random.Random(seeds[i])
        c = server.client()
        try:
            go.wait()
            wait = r_.choice([50, 3000, 3000])
            r = acquire_many(c, sets[i], "s%d" % i, ttl_ms=30000, wait_ms=wait)
            if r.status != 200:
                assert r.status == 409 and r.code == "lease_held", r
                return
            with lock:
                for n in sets[i]:
                    assert n not in holding, "%s granted to s%d while s%s holds it (seed %d)" % (
                        n, i, holding[n], SEED)
                    holding[n] = i
            lid = r.json["leases"][0]["lease_id"]
            time.sleep(r_.choice([0, 0.002, 0.01]))
            order = list(sets[i])
            r_.shuffle(order)
            for n in order:
                with lock:
                    del holding[n]
                rr = c.release(n, lid)
                assert rr.status == 200, rr
                time.sleep(r_.choice([0, 0.003]))
        finally:
            c.close()

    def watch():
        c = server.client()
        try:
            for _ in range(5):
                for n in names:
                    hs = holders(c, n)
                    assert len(hs) <= 1, "two holders of %s: %s (seed %d)" % (n, hs, SEED)
                time.sleep(0.003)
        finally:
            c.close()
    run_threads([lambda i=i: one(i) for i in range(3)] + [watch])


def test_three_sets_round_three_resources_released_one_by_one():
    rng = random.Random(SEED + 1)
    print("seed", SEED)
    with Server(args=["--threads", "8"]) as s:
        for rnd in range(25):
            run_threads([lambda k=k: three_sets_round(s, "%d-%d" % (rnd, k), rng)
                         for k in range(4)])
        c = s.client()
        wait_metric_zero(c)
        r = c.request("GET", "/v1/resources?prefix=race3/")
        assert r.status == 200 and r.json["resources"] == [], r
        c.close()


def test_a_retried_set_is_not_answered_with_a_lease_that_ran_out_as_it_waited(server):
    """A set retried with its lease id, whose lease on `a` still holds: that part is
    answered at once while `b` waits. If a's lease runs out meanwhile and another client
    takes `a`, the set may not be granted with its old lease on `a`."""
    c = server.client()
    lid = "6f1a7a52-2b43-4b7e-9c55-3d7f2d1e0a01"
    r = c.acquire("retry/a", owner="set", lease_id=lid, ttl_ms=1000)
    assert r.status == 200, r
    x = c.acquire("retry/b", owner="x", ttl_ms=30000)
    assert x.status == 200, x
    t = {}

    def retry():
        cc = server.client()
        try:
            t["r"] = acquire_many(cc, ["retry/a", "retry/b"], "set", lease_id=lid,
                                  ttl_ms=1000, wait_ms=15000)
        finally:
            cc.close()
    th = threading.Thread(target=retry)
    th.start()
    time.sleep(2.5)  # a's lease, renewed by the retry's part, has run out
    z = c.acquire("retry/a", owner="z", ttl_ms=30000)
    assert z.status == 200, z
    r = c.release("retry/b", x.json["lease_id"])
    assert r.status == 200, r
    th.join(20)
    got = t["r"]
    hs = holders(c, "retry/a")
    assert [h["owner"] for h in hs] == ["z"], hs
    assert got.status != 200, "the set was granted with a lease on retry/a that z holds: %s" % got
    assert got.status == 503, got
    # Nothing of the set stays: b is free for the next.
    assert holders(c, "retry/b") == []
    c.close()
