"""Durability across restarts (docs/api.md, "Durability promise"): a real SQLite file in a
data directory that outlives the server, stopped cleanly or killed with SIGKILL."""

import os
import re
import sqlite3
import tempfile
import time
import uuid

import pytest

from harness import Server


@pytest.fixture
def data_dir():
    d = tempfile.mkdtemp(prefix="mutexd-durable-")
    yield d
    import shutil
    shutil.rmtree(d, ignore_errors=True)


@pytest.mark.parametrize("crash", [False, True], ids=["sigterm", "sigkill"])
def test_leases_survive_restart_with_remaining_time(data_dir, crash):
    s = Server(data_dir=data_dir).start()
    c = s.client()
    a = c.acquire("keep", owner="a", ttl_ms=20000, metadata={"addr": "10.1.2.3:80"}).json
    exact = '{"id":9007199254740993,"f":1.10}'
    c.post("exact", "acquire", '{"owner":"x","ttl_ms":60000,"metadata":%s}' % exact)
    b = c.acquire("gone", owner="b", ttl_ms=1000).json
    rel = c.acquire("released", owner="r", ttl_ms=20000).json
    c.release("released", rel["lease_id"])
    index_before = c.get("keep").json["index"]
    c.close()
    if crash:
        s.kill()
    else:
        s.stop()
    time.sleep(2.5)  # "gone" runs out while the server is down; "keep" loses 2.5 s too

    s = Server(data_dir=data_dir).start()
    c = s.client()
    g = c.get("keep").json
    assert g["state"] == "held"
    h = g["holder"]
    assert h["fencing_token"] == a["fencing_token"] and h["owner"] == "a"
    assert h["metadata"] == {"addr": "10.1.2.3:80"}
    assert exact in c.get("exact").body  # as written, through SQLite
    # The wall clock counts while the server is down: no TTL comes back in full.
    assert 15000 < h["expires_in_ms"] <= 20000 - 2500, h
    assert g["index"] == index_before
    assert c.get("gone").json["state"] == "free"
    assert c.get("released").json["state"] == "free"
    # The holder of "keep" still owns it: renew works, a stranger's acquire does not.
    assert c.renew("keep", a["lease_id"]).json["fencing_token"] == a["fencing_token"]
    assert c.acquire("keep", owner="x").status == 409
    # "gone" expired during the downtime: its holder may still renew it (nothing granted since)
    r = c.renew("gone", b["lease_id"])
    assert r.status == 200 and r.json["fencing_token"] == b["fencing_token"]
    # New grants get larger tokens than any before the restart.
    n = c.acquire("new", owner="n").json
    assert n["fencing_token"] > max(a["fencing_token"], b["fencing_token"], rel["fencing_token"])
    assert [x["resource"] for x in c.request("GET", "/v1/resources").json["resources"]] == [
        "exact", "gone", "keep", "new"]
    c.close()
    s.stop()


def test_tokens_never_repeat_after_every_lease_is_released(data_dir):
    top = 0
    for _ in range(3):
        with Server(data_dir=data_dir) as s:
            c = s.client()
            for k in range(5):
                a = c.acquire("t%d" % k, owner="o").json
                assert a["fencing_token"] > top
                top = a["fencing_token"]
                c.release("t%d" % k, a["lease_id"])
            c.close()
    assert top == 15


def test_index_keeps_increasing_across_restarts(data_dir):
    seen = []
    for crash in (False, True, False):
        s = Server(data_dir=data_dir).start()
        c = s.client()
        seen.append(c.get("ix").json["index"])
        a = c.acquire("ix", owner="o", ttl_ms=1000).json
        seen.append(c.get("ix").json["index"])
        c.release("ix", a["lease_id"])
        seen.append(c.get("ix").json["index"])
        c.close()
        s.kill() if crash else s.stop()
    s = Server(data_dir=data_dir).start()
    c = s.client()
    seen.append(c.get("ix").json["index"])
    # An expiry during downtime is a change too.
    c.acquire("ix", owner="o", ttl_ms=1000)
    seen.append(c.get("ix").json["index"])
    c.close()
    s.kill()
    time.sleep(1.2)
    s = Server(data_dir=data_dir).start()
    c = s.client()
    g = c.get("ix").json
    seen.append(g["index"])
    assert g["state"] == "free"
    c.close()
    s.stop()
    assert all(x <= y for x, y in zip(seen, seen[1:])), seen
    assert seen[-1] > seen[-2], seen


def test_store_is_sqlite_wal_with_full_sync(data_dir):
    with Server(data_dir=data_dir) as s:
        c = s.client()
        c.acquire("x", owner="o")
        c.close()
        assert os.path.exists(os.path.join(data_dir, "mutexd.db-wal"))
    db = sqlite3.connect(os.path.join(data_dir, "mutexd.db"))
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert db.execute("PRAGMA user_version").fetchone()[0] >= 1
    row = db.execute("SELECT resource, held, owner FROM holders").fetchall()
    assert row == [("x", 1, "o")]
    assert db.execute("SELECT resource, lim FROM resources").fetchall() == [("x", 1)]
    db.close()


def test_newer_schema_is_refused(data_dir):
    with Server(data_dir=data_dir):
        pass
    db = sqlite3.connect(os.path.join(data_dir, "mutexd.db"))
    db.execute("PRAGMA user_version = 999")
    db.commit()
    db.close()
    s = Server(data_dir=data_dir)
    with pytest.raises(RuntimeError) as e:
        s.start(timeout=5)
    assert "schema version 999" in str(e.value)


def test_data_dir_lock_is_released_after_sigkill(data_dir):
    s = Server(data_dir=data_dir).start()
    s.kill()
    with Server(data_dir=data_dir) as s2:  # the kernel dropped the flock with the process
        assert s2.client().request("GET", "/healthz").status == 200


def test_acquire_with_own_lease_id_is_safe_to_retry_across_a_crash(data_dir):
    lid = str(uuid.uuid4())
    s = Server(data_dir=data_dir).start()
    c = s.client()
    first = c.acquire("retry", owner="o", ttl_ms=30000, lease_id=lid).json
    c.close()
    s.kill()
    s = Server(data_dir=data_dir).start()
    c = s.client()
    again = c.acquire("retry", owner="o", ttl_ms=30000, lease_id=lid)
    assert again.status == 200 and again.json["fencing_token"] == first["fencing_token"]
    c.close()
    s.stop()


def metric(client, name):
    m = re.search(r"^%s (\d+)$" % name, client.request("GET", "/metrics").body, re.M)
    assert m, name
    return int(m.group(1))


def wait_metric(client, name, want, timeout):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if metric(client, name) == want:
            return time.monotonic()
        time.sleep(0.05)
    raise AssertionError("%s never became %d (is %d)" % (name, want, metric(client, name)))


def test_every_answered_change_survives_sigkill_whichever_thread_commits_it(data_dir):
    """A client alone has its change committed on its own request's thread (nothing to
    batch with); many clients at once go through the writer's group commits. Either way a
    200 comes after the fsync: a SIGKILL right after the last answer loses none of them."""
    import threading
    s = Server(data_dir=data_dir).start()
    c = s.client()
    here = metric(c, "mutexd_store_batches_here_total")
    granted = {}
    for i in range(30):
        r = c.acquire("alone/%d" % i, owner="a", ttl_ms=60000)
        assert r.status == 200
        granted["alone/%d" % i] = r.json["fencing_token"]
    # One request at a time: (nearly) every change was committed on its request's thread.
    assert metric(c, "mutexd_store_batches_here_total") - here >= 28

    lock, errors = threading.Lock(), []

    def worker(k):
        w = s.client()
        try:
            for i in range(20):
                name = "many/%d/%d" % (k, i)
                r = w.acquire(name, owner="w%d" % k, ttl_ms=60000)
                if r.status != 200:
                    errors.append(r.status)
                    return
                with lock:
                    granted[name] = r.json["fencing_token"]
        finally:
            w.close()

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors[:3]
    assert len(granted) == 30 + 16 * 20
    c.close()
    s.kill()

    s = Server(data_dir=data_dir).start()
    c = s.client()
    for name, token in granted.items():
        g = c.get(name).json
        assert g["state"] == "held" and g["holder"]["fencing_token"] == token, (name, g)
    c.close()
    s.stop()


def test_a_held_lease_rests_without_its_actor_and_still_runs_out(data_dir):
    """A lease nobody waits for or watches keeps no actor in memory: its expiry is an alarm
    that wakes the resource when the TTL is up. GET, renew and expiry all still work."""
    s = Server(data_dir=data_dir).start()
    c = s.client()
    a = c.acquire("rest", owner="a", ttl_ms=5000).json
    wait_metric(c, "mutexd_actors_active", 0, 4.5)  # idle after ~2 s, lease still in force
    assert metric(c, "mutexd_leases_held") == 1
    assert metric(c, "mutexd_lease_alarms") == 1
    g = c.get("rest").json  # wakes the actor from the store, which rests again
    assert g["state"] == "held" and g["holder"]["fencing_token"] == a["fencing_token"]
    # Rests again 2.0-2.5 s after the renewal (idle time plus the sweep's period), well
    # before the renewed TTL runs out: a slow machine gets 1.5 s of slack.
    assert c.renew("rest", a["lease_id"], ttl_ms=4000).status == 200
    t0 = time.monotonic()
    wait_metric(c, "mutexd_actors_active", 0, 3.8)
    assert metric(c, "mutexd_expiries_total") == 0  # not before its (renewed) TTL
    t = wait_metric(c, "mutexd_expiries_total", 1, 5)
    assert 4.0 - 0.2 <= t - t0 <= 4.0 + 1.0, t - t0
    # The server's own account of it: one expiry, less than a second late.
    text = c.request("GET", "/metrics").body
    assert re.search(r"^mutexd_expiry_lateness_seconds_count 1$", text, re.M)
    assert re.search(r'^mutexd_expiry_lateness_seconds_bucket\{le="1"\} 1$', text, re.M)
    assert metric(c, "mutexd_leases_held") == 0
    assert metric(c, "mutexd_lease_alarms") == 0
    assert c.get("rest").json["state"] == "free"
    # And the next holder gets a larger token at once; its release, after it rested,
    # takes its alarm away too.
    b = c.acquire("rest", owner="b").json
    assert b["fencing_token"] > a["fencing_token"]
    wait_metric(c, "mutexd_actors_active", 0, 4.5)
    assert metric(c, "mutexd_lease_alarms") == 1
    assert c.release("rest", b["lease_id"]).status == 200
    wait_metric(c, "mutexd_lease_alarms", 0, 1)
    assert metric(c, "mutexd_leases_held") == 0
    c.close()
    s.stop()


def test_leases_rest_after_sigkill_and_run_out_on_time(data_dir):
    """A restart wakes no actor for the leases it finds: it counts them and sets their
    alarms; each runs out at its own time, and a blocked acquire still gets it."""
    s = Server(data_dir=data_dir).start()
    c = s.client()
    short = c.acquire("short", owner="a", ttl_ms=4000).json
    c.acquire("long", owner="b", ttl_ms=60000)
    for i in range(50):
        c.acquire("many-%d" % i, owner="m", ttl_ms=60000)
    c.close()
    s.kill()
    s = Server(data_dir=data_dir).start()
    c = s.client()
    assert metric(c, "mutexd_leases_held") == 52
    assert metric(c, "mutexd_lease_alarms") == 52
    assert metric(c, "mutexd_actors_active") == 0
    # A blocked acquire on "short" is served when the rested lease runs out.
    r = c.acquire("short", owner="w", wait_ms=10000).json
    assert r["fencing_token"] > short["fencing_token"] and r["owner"] == "w"
    assert metric(c, "mutexd_expiries_total") == 1
    assert metric(c, "mutexd_leases_held") == 52
    assert c.get("long").json["holder"]["owner"] == "b"
    c.close()
    s.stop()
