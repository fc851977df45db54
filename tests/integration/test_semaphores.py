"""Semaphores and shared leases (docs/api.md, "Semaphores and shared leases"), sentence by
sentence, against a real server. Faults, restarts, takeovers and concurrency invariants
under load are in test_semaphore_faults.py."""

import re
import threading
import time
import uuid

import pytest

from harness import Server

HOLDER_FIELDS = {"owner", "fencing_token", "shared", "ttl_ms", "expires_in_ms", "acquired_at",
                 "renewed_at", "metadata"}


def check_error(r, status, code, field=None):
    assert r.status == status, r
    assert r.code == code, r
    if field is not None:
        assert r.json["error"].get("field") == field, r


def waiting(server, resource, results, key, **fields):
    """Starts an acquire that waits, on its own connection; its answer goes to results[key]."""
    def run():
        c = server.client()
        try:
            results[key] = c.acquire(resource, **fields)
        finally:
            c.close()
    t = threading.Thread(target=run)
    t.start()
    return t


def wait_waiters(client, resource, n, timeout=10):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if client.get(resource).json["waiters"] == n:
            return
        time.sleep(0.01)
    raise AssertionError("%s: %d waiters expected, %r" % (resource, n, client.get(resource)))


def test_a_semaphore_holds_up_to_its_limit_each_with_its_own_lease(client):
    leases = []
    for i in range(3):
        r = client.acquire("enc", owner="w%d" % i, limit=3)
        assert r.status == 200, r
        assert r.json["limit"] == 3 and r.json["shared"] is False
        leases.append(r.json)
    assert len({l["lease_id"] for l in leases}) == 3
    tokens = [l["fencing_token"] for l in leases]
    assert tokens == sorted(tokens) and len(set(tokens)) == 3
    full = client.acquire("enc", owner="w3", limit=3)
    check_error(full, 409, "lease_held")
    # Releasing one lease frees one place.
    assert client.release("enc", leases[1]["lease_id"]).status == 200
    r = client.acquire("enc", owner="w3", limit=3)
    assert r.status == 200 and r.json["fencing_token"] > max(tokens), r
    check_error(client.acquire("enc", owner="w4", limit=3), 409, "lease_held")
    # Each lease renews on its own, keeping its token.
    rn = client.renew("enc", leases[2]["lease_id"], ttl_ms=9000)
    assert rn.status == 200 and rn.json["fencing_token"] == leases[2]["fencing_token"], rn
    assert rn.json["limit"] == 3 and rn.json["ttl_ms"] == 9000


def test_the_limit_belongs_to_the_resource_while_it_has_holders(client):
    a = client.acquire("lim", owner="a", limit=2).json
    other = client.acquire("lim", owner="b", limit=5)
    check_error(other, 409, "limit_mismatch")
    assert other.json["error"]["limit"] == 2
    # An acquire without limit names 1: limit_mismatch, also when the semaphore is full.
    check_error(client.acquire("lim", owner="c"), 409, "limit_mismatch")
    client.acquire("lim", owner="d", limit=2)
    full = client.acquire("lim", owner="e")
    check_error(full, 409, "limit_mismatch")
    assert full.json["error"]["limit"] == 2
    # Once it has no holders, the next acquire sets a new limit.
    client.brk("lim")
    assert client.acquire("lim", owner="f", limit=4).json["limit"] == 4
    assert client.get("lim").json["limit"] == 4
    assert a["limit"] == 2


def test_an_acquire_with_another_limit_is_refused_at_once_even_if_it_would_wait(server, client):
    """A waiter is queued only under the limit in force, so its limit still holds when its
    turn comes (the resource has holders until then, and the queue empties whenever it has
    none): the 409 at the head of the queue that the contract names cannot arise here; the
    resource's model test (tests/unit/actors/test_resource_model.c) covers the rule itself."""
    h = client.acquire("qlim", owner="h", ttl_ms=60000).json  # limit 1
    t0 = time.monotonic()
    r = client.acquire("qlim", owner="x", limit=3, wait_ms=20000)
    check_error(r, 409, "limit_mismatch")
    assert r.json["error"]["limit"] == 1 and time.monotonic() - t0 < 5
    results = {}
    t = waiting(server, "qlim", results, "w", owner="w", limit=1, wait_ms=20000)
    wait_waiters(client, "qlim", 1)
    assert client.release("qlim", h["lease_id"]).status == 200
    t.join(10)
    assert results["w"].status == 200 and results["w"].json["limit"] == 1


def test_shared_leases_hold_together_and_an_exclusive_one_alone(server, client):
    r1 = client.acquire("rw", owner="r1", shared=True, ttl_ms=60000)
    r2 = client.acquire("rw", owner="r2", shared=True, ttl_ms=60000)
    assert r1.status == 200 and r2.status == 200
    assert r1.json["shared"] is True and r1.json["limit"] == 1
    writer = client.acquire("rw", owner="w")
    check_error(writer, 409, "lease_held")
    assert writer.json["error"]["holder"]["owner"] == "r1"  # ends first
    g = client.get("rw").json
    assert [h["owner"] for h in g["holders"]] == ["r1", "r2"]
    assert all(h["shared"] for h in g["holders"])
    # Readers out, the writer in; then a reader waits for the writer.
    client.release("rw", r1.json["lease_id"])
    client.release("rw", r2.json["lease_id"])
    w = client.acquire("rw", owner="w", ttl_ms=60000)
    assert w.status == 200 and w.json["shared"] is False
    check_error(client.acquire("rw", owner="r3", shared=True), 409, "lease_held")


def test_shared_with_a_limit_is_invalid(client):
    check_error(client.acquire("x", owner="o", shared=True, limit=2), 400, "invalid_field",
                "shared")
    assert client.acquire("x", owner="o", shared=True, limit=1).status == 200
    check_error(client.acquire("y", owner="o", shared="yes"), 400, "invalid_field", "shared")
    for bad in (0, -1, 1.5, "3", 1025):
        check_error(client.acquire("y", owner="o", limit=bad), 400, "invalid_field", "limit")


def test_a_writer_queued_behind_readers_is_not_overtaken_by_later_readers(server, client):
    r1 = client.acquire("fifo", owner="r1", shared=True, ttl_ms=60000).json
    results = {}
    tw = waiting(server, "fifo", results, "w", owner="w", wait_ms=20000, ttl_ms=60000)
    wait_waiters(client, "fifo", 1)
    tr = waiting(server, "fifo", results, "r2", owner="r2", shared=True, wait_ms=20000)
    wait_waiters(client, "fifo", 2)
    # r2 would fit beside r1 now, but the writer is queued before it.
    check_error(client.acquire("fifo", owner="r3", shared=True), 409, "lease_held")
    assert client.get("fifo").json["holders"][0]["owner"] == "r1"
    assert len(client.get("fifo").json["holders"]) == 1
    client.release("fifo", r1["lease_id"])
    tw.join(10)
    assert results["w"].status == 200, results
    assert "r2" not in results
    client.release("fifo", results["w"].json["lease_id"])
    tr.join(10)
    assert results["r2"].status == 200
    assert results["r2"].json["fencing_token"] > results["w"].json["fencing_token"]


def test_after_a_release_every_waiter_that_fits_is_granted_at_once_in_order(server, client):
    w = client.acquire("burst", owner="w", ttl_ms=60000).json
    results, threads = {}, []
    for i in range(4):
        threads.append(waiting(server, "burst", results, i, owner="r%d" % i, shared=True,
                               wait_ms=20000))
        wait_waiters(client, "burst", i + 1)
    threads.append(waiting(server, "burst", results, "w2", owner="w2", wait_ms=20000))
    wait_waiters(client, "burst", 5)
    client.release("burst", w["lease_id"])
    for t in threads[:4]:
        t.join(10)
    assert [results[i].status for i in range(4)] == [200] * 4
    tokens = [results[i].json["fencing_token"] for i in range(4)]
    assert tokens == sorted(tokens)  # in queue order
    g = client.get("burst").json
    assert len(g["holders"]) == 4 and g["waiters"] == 1  # the writer still waits
    for i in range(4):
        client.release("burst", results[i].json["lease_id"])
    threads[4].join(10)
    assert results["w2"].status == 200


def test_max_holders_bounds_a_resource(tmp_path):
    with Server(data_dir=str(tmp_path / "d"), args=["--max-holders", "3"]) as s:
        c = s.client()
        check_error(c.acquire("m", owner="o", limit=4), 400, "invalid_field", "limit")
        assert c.acquire("m", owner="o", limit=3).status == 200
        c.brk("m")
        for i in range(3):
            assert c.acquire("s", owner="r%d" % i, shared=True).status == 200
        # A shared acquire beyond --max-holders: lease_held at once, or it waits.
        check_error(c.acquire("s", owner="r3", shared=True), 409, "lease_held")
        results = {}
        t = waiting(s, "s", results, "r4", owner="r4", shared=True, wait_ms=20000)
        wait_waiters(c, "s", 1)
        lid = c.get("s")  # the oldest's lease id is not shown; break it by name instead
        assert len(lid.json["holders"]) == 3
        c.brk("s")
        t.join(10)
        assert results["r4"].status == 200
        c.close()


def test_lease_held_names_the_holder_that_ends_first(client):
    client.acquire("first", owner="long", limit=2, ttl_ms=30000)
    client.acquire("first", owner="short", limit=2, ttl_ms=4000)
    r = client.acquire("first", owner="x", limit=2)
    check_error(r, 409, "lease_held")
    h = r.json["error"]["holder"]
    assert h["owner"] == "short"
    assert int(r.header("Retry-After")) == -(-h["expires_in_ms"] // 1000)


def test_get_and_list_show_every_holder_oldest_first(client):
    for i in range(3):
        client.acquire("view/sem", owner="h%d" % i, limit=3, metadata={"i": i})
    g = client.get("view/sem").json
    assert g["state"] == "held" and g["limit"] == 3
    assert [h["owner"] for h in g["holders"]] == ["h0", "h1", "h2"]
    for h in g["holders"]:
        assert set(h) == HOLDER_FIELDS and h["shared"] is False
    assert g["holder"] == g["holders"][0]
    tokens = [h["fencing_token"] for h in g["holders"]]
    assert tokens == sorted(tokens)
    lst = client.request("GET", "/v1/resources?prefix=view/").json["resources"]
    assert len(lst) == 1
    assert [h["owner"] for h in lst[0]["holders"]] == ["h0", "h1", "h2"]
    assert lst[0]["limit"] == 3
    # A free resource.
    f = client.get("view/free").json
    assert f["limit"] == 1 and f["holders"] == [] and f["holder"] is None
    assert f["state"] == "free"


def test_break_ends_every_lease_or_the_one_named(client):
    a = client.acquire("brk", owner="a", limit=3).json
    b = client.acquire("brk", owner="b", limit=3).json
    client.acquire("brk", owner="c", limit=3)
    r = client.brk("brk", lease_id=b["lease_id"])
    assert r.status == 200 and r.json == {"resource": "brk", "broken": True}
    assert [h["owner"] for h in client.get("brk").json["holders"]] == ["a", "c"]
    # That lease holds nothing now: broken false, the others stay.
    r = client.brk("brk", lease_id=b["lease_id"])
    assert r.json["broken"] is False
    r = client.brk("brk", lease_id=str(uuid.uuid4()))
    assert r.json["broken"] is False
    assert len(client.get("brk").json["holders"]) == 2
    check_error(client.renew("brk", b["lease_id"]), 409, "lease_lost")
    r = client.brk("brk")
    assert r.json["broken"] is True
    assert client.get("brk").json["holders"] == []
    check_error(client.renew("brk", a["lease_id"]), 409, "lease_lost")


def test_an_expired_lease_renews_until_a_grant_takes_its_place(server, client):
    a = client.acquire("exp", owner="a", limit=2, ttl_ms=1000).json
    b = client.acquire("exp", owner="b", limit=2, ttl_ms=30000).json
    time.sleep(1.3)
    # a expired; no grant since: a may renew, with its token.
    r = client.renew("exp", a["lease_id"])
    assert r.status == 200 and r.json["fencing_token"] == a["fencing_token"], r
    time.sleep(1.3)
    # a expired again; a grant takes its place: a is lost.
    c = client.acquire("exp", owner="c", limit=2).json
    check_error(client.renew("exp", a["lease_id"]), 409, "lease_lost")
    check_error(client.release("exp", a["lease_id"]), 409, "lease_lost")
    assert c["fencing_token"] > b["fencing_token"]
    assert client.release("exp", b["lease_id"]).status == 200


def test_a_retry_with_its_own_lease_id_must_name_the_same_kind(client):
    lid = str(uuid.uuid4())
    a = client.acquire("retry", owner="a", limit=2, lease_id=lid)
    assert a.status == 200
    again = client.acquire("retry", owner="a", limit=2, lease_id=lid)
    assert again.status == 200 and again.json["fencing_token"] == a.json["fencing_token"]
    r = client.acquire("retry", owner="a", limit=3, lease_id=lid)
    check_error(r, 409, "limit_mismatch")
    assert r.json["error"]["limit"] == 2
    client.brk("retry")
    sid = str(uuid.uuid4())
    assert client.acquire("retry2", owner="r", shared=True, lease_id=sid).status == 200
    check_error(client.acquire("retry2", owner="r", lease_id=sid), 400, "invalid_field",
                "shared")


def test_metrics_count_holders_waiters_and_grants_by_kind(server, client):
    client.acquire("k/x", owner="x")
    client.acquire("k/s", owner="s", shared=True)
    client.acquire("k/s", owner="s2", shared=True)
    for i in range(3):
        client.acquire("k/sem", owner="e%d" % i, limit=3)
    m = client.request("GET", "/metrics").body

    def val(name, kind):
        return int(re.search(r'^%s\{kind="%s"\} (\d+)$' % (name, kind), m, re.M).group(1))
    assert val("mutexd_holders", "exclusive") == 1
    assert val("mutexd_holders", "shared") == 2
    assert val("mutexd_holders", "semaphore") == 3
    assert val("mutexd_grants_by_kind_total", "semaphore") == 3
    assert val("mutexd_grants_by_kind_total", "shared") == 2
    results = {}
    t = waiting(server, "k/sem", results, "w", owner="w", limit=3, wait_ms=3000)
    wait_waiters(client, "k/sem", 1)
    m = client.request("GET", "/metrics").body
    assert val("mutexd_waiters_by_kind", "semaphore") == 1
    t.join(10)
