"""The server-wide change index, list watches, the event feed and whoami (docs/api.md,
"Watching many resources, and recent events" and "The dashboard"), against a real server."""

import threading
import time
import uuid

import pytest

from harness import Server, free_port
from test_security import TOKENS, bearer, tokens_file

EVENT_FIELDS = {"index", "at", "resource", "type", "owner", "fencing_token", "shared", "limit"}


def events(client, query=""):
    r = client.request("GET", "/v1/events" + query)
    assert r.status == 200, r
    return r.json


def in_background(fn):
    box = {}

    def run():
        t0 = time.monotonic()
        box["answer"] = fn()
        box["after"] = time.monotonic() - t0
    t = threading.Thread(target=run)
    t.start()
    return t, box


def test_every_change_is_an_event_with_the_next_index(client):
    a = client.acquire("ev/a", owner="alice", ttl_ms=1000).json
    client.renew("ev/a", a["lease_id"])
    client.release("ev/a", a["lease_id"])
    b = client.acquire("ev/b", owner="bob", limit=2, ttl_ms=1000).json
    client.acquire("ev/c", owner="carol", shared=True)
    client.brk("ev/c", reason="test")
    time.sleep(1.3)
    client.get("ev/b")  # the expiry is applied by now
    feed = events(client)
    got = [(e["resource"], e["type"], e["owner"]) for e in feed["events"]]
    assert got == [("ev/a", "granted", "alice"), ("ev/a", "renewed", "alice"),
                   ("ev/a", "released", "alice"), ("ev/b", "granted", "bob"),
                   ("ev/c", "granted", "carol"), ("ev/c", "broken", "carol"),
                   ("ev/b", "expired", "bob")], got
    idx = [e["index"] for e in feed["events"]]
    assert idx == sorted(idx) and len(set(idx)) == len(idx)
    for e in feed["events"]:
        assert set(e) == EVENT_FIELDS, e
        assert e["at"].endswith("Z")
    assert feed["events"][3]["limit"] == 2 and feed["events"][3]["fencing_token"] == \
        b["fencing_token"]
    assert feed["events"][4]["shared"] is True
    assert a["lease_id"] not in str(feed) and b["lease_id"] not in str(feed)
    assert feed["next"] == idx[-1] and feed["truncated"] is False
    # A resource's index is the change index of its last change.
    assert client.get("ev/b").json["index"] == idx[-1]
    # after, prefix, limit.
    assert [e["index"] for e in events(client, "?after=%d" % idx[4])["events"]] == idx[5:]
    only_a = events(client, "?prefix=ev/a")["events"]
    assert {e["resource"] for e in only_a} == {"ev/a"}
    page = events(client, "?limit=2")
    assert len(page["events"]) == 2 and page["next"] == idx[1]
    rest = events(client, "?after=%d&limit=1000" % page["next"])
    assert [e["index"] for e in rest["events"]] == idx[2:]


def test_bad_event_queries_are_refused(client):
    for q, field in (("?after=x", "after"), ("?limit=0", "limit"), ("?limit=1001", "limit"),
                     ("?wait_ms=-1", "wait_ms")):
        r = client.request("GET", "/v1/events" + q)
        assert r.status == 400 and r.json["error"].get("field") == field, (q, r)
    r = client.request("GET", "/v1/events?lease_id=x")
    assert r.status == 400 and r.code == "unknown_field"
    assert client.request("POST", "/v1/events", {}).status == 405


def test_events_wait_for_a_change_after_the_index(server, client):
    last = events(client)["next"]
    other = server.client()
    t, box = in_background(
        lambda: other.request("GET", "/v1/events?after=%d&prefix=w/&wait_ms=10000" % last))
    time.sleep(0.5)
    client.acquire("elsewhere", owner="x")  # another prefix: still held
    time.sleep(0.3)
    assert t.is_alive()
    client.acquire("w/one", owner="y")
    t.join(5)
    r = box["answer"]
    assert r.status == 200 and [e["resource"] for e in r.json["events"]] == ["w/one"]
    assert box["after"] < 5
    # Nothing comes: answered empty when wait_ms runs out.
    t0 = time.monotonic()
    r = client.request("GET", "/v1/events?after=%d&prefix=none/&wait_ms=700" %
                       r.json["next"])
    assert r.status == 200 and r.json["events"] == []
    assert 0.6 < time.monotonic() - t0 < 5
    other.close()


def test_a_small_history_says_it_dropped_events(tmp_path):
    with Server(data_dir=str(tmp_path / "d"), args=["--event-history", "3"]) as s:
        c = s.client()
        for i in range(6):
            c.acquire("h/%d" % i, owner="o")
        feed = events(c, "?after=0")
        assert feed["truncated"] is True
        assert [e["resource"] for e in feed["events"]] == ["h/3", "h/4", "h/5"]
        assert events(c, "?after=%d" % feed["events"][0]["index"])["truncated"] is False
        c.close()
    with Server(data_dir=str(tmp_path / "e"), args=["--event-history", "0"]) as s:
        c = s.client()
        c.acquire("x", owner="o")
        feed = events(c, "?after=0")
        assert feed["events"] == [] and feed["truncated"] is True and feed["next"] == 1
        # The list watch still works without history.
        t, box = in_background(lambda: s.client().request(
            "GET", "/v1/resources?prefix=y&index=1&wait_ms=10000"))
        time.sleep(0.3)
        assert t.is_alive()
        c.acquire("y", owner="o")
        t.join(5)
        assert box["answer"].json["index"] == 2
        c.close()


def test_a_list_watch_is_held_until_a_change_under_its_prefix(server, client):
    client.acquire("lw/a", owner="a", ttl_ms=60000)
    first = client.request("GET", "/v1/resources?prefix=lw/")
    assert first.status == 200
    index = first.json["index"]
    assert [r["resource"] for r in first.json["resources"]] == ["lw/a"]
    other = server.client()
    t, box = in_background(lambda: other.request(
        "GET", "/v1/resources?prefix=lw/&index=%d&wait_ms=10000" % index))
    time.sleep(0.5)
    client.acquire("lx/b", owner="x")  # not under lw/
    time.sleep(0.3)
    assert t.is_alive(), "woken by a change under another prefix"
    b = client.acquire("lw/b", owner="b").json
    t.join(5)
    r = box["answer"]
    assert r.status == 200 and box["after"] < 5
    assert [x["resource"] for x in r.json["resources"]] == ["lw/a", "lw/b"]
    assert r.json["index"] > index
    # A resource that becomes free and leaves the list wakes a watch too.
    t, box = in_background(lambda: other.request(
        "GET", "/v1/resources?prefix=lw/&index=%d&wait_ms=10000" % r.json["index"]))
    time.sleep(0.3)
    client.release("lw/b", b["lease_id"])
    t.join(5)
    assert [x["resource"] for x in box["answer"].json["resources"]] == ["lw/a"]
    # An index from before a change is answered at once; paging works with a watch.
    page = client.request("GET", "/v1/resources?prefix=lw/&index=%d&wait_ms=10000&limit=1"
                          % index)
    assert page.status == 200 and len(page.json["resources"]) == 1
    assert page.json["next_cursor"] is None or isinstance(page.json["next_cursor"], str)
    # wait_ms runs out: the same list, answered.
    t0 = time.monotonic()
    same = client.request("GET", "/v1/resources?prefix=lw/&index=%d&wait_ms=600" %
                          box["answer"].json["index"])
    assert same.status == 200 and 0.5 < time.monotonic() - t0 < 5
    other.close()


def test_a_watch_whose_client_goes_away_is_dropped(server, client):
    import socket
    for _ in range(20):
        s = socket.create_connection((server.host, server.port))
        s.sendall(b"GET /v1/events?after=999999&wait_ms=60000 HTTP/1.1\r\nHost: x\r\n\r\n")
        s.close()
    time.sleep(1)
    # The server goes on, and a new wait still ends at a change.
    last = events(client)["next"]
    t, box = in_background(lambda: server.client().request(
        "GET", "/v1/events?after=%d&wait_ms=10000" % last))
    time.sleep(0.3)
    client.acquire("after-hangups", owner="o")
    t.join(5)
    assert box["answer"].status == 200 and len(box["answer"].json["events"]) == 1


def test_the_change_index_goes_on_across_a_restart(tmp_path):
    d = str(tmp_path / "d")
    s = Server(data_dir=d).start()
    c = s.client()
    for i in range(5):
        c.acquire("r/%d" % i, owner="o", ttl_ms=60000)
    before = events(c)["next"]
    c.close()
    s.kill()
    s = Server(data_dir=d).start()
    c = s.client()
    feed = events(c, "?after=%d" % (before - 1))
    assert feed["truncated"] is True and feed["events"] == []  # events start afresh
    c.acquire("r/new", owner="o")
    assert events(c)["events"][-1]["index"] > before
    assert c.get("r/new").json["index"] > before
    c.close()
    s.stop()


def with_a_metrics_token(tmp_path):
    """The test tokens and one with the metrics scope alone ("watcher"), and their file."""
    tokens = dict(TOKENS)
    tokens["watcher"] = ("m-" + "d" * 40, "metrics", None)
    path = str(tmp_path / "tokens")
    tokens_file(path, tokens)
    return tokens, path


def test_whoami_without_and_with_authorization(client, tmp_path):
    r = client.request("GET", "/v1/whoami")
    assert r.status == 200
    assert r.json == {"name": None, "scopes": ["read", "write", "admin", "metrics"]}
    tokens, path = with_a_metrics_token(tmp_path)
    with Server(args=["--auth-tokens", path]) as s:
        c = s.client()
        assert c.request("GET", "/v1/whoami").status == 401
        assert c.request("GET", "/v1/whoami",
                         headers={"Authorization": "Bearer nope"}).status == 401
        me = c.request("GET", "/v1/whoami", headers=bearer("operator"))
        assert me.json == {"name": "operator", "scopes": ["read", "write", "admin"]}
        me = c.request("GET", "/v1/whoami", headers=bearer("watcher", tokens))
        assert me.status == 200 and me.json["scopes"] == ["metrics"]  # no scope needed
        # Events and list watches need read.
        assert c.request("GET", "/v1/events", headers=bearer("watcher", tokens)).status == 403
        assert c.request("GET", "/v1/events", headers=bearer("reader")).status == 200
        # A token limited to a prefix reads the events under it only.
        assert c.request("GET", "/v1/events?prefix=jobs/",
                         headers=bearer("deployer")).status == 200
        assert c.request("GET", "/v1/events", headers=bearer("deployer")).status == 403
        c.close()


def test_a_lone_server_describes_itself_as_alone(client, tmp_path):
    """Without --ha, GET /v1/servers is a 200 naming no group, never a 404 (a browser logs
    every 404 of the dashboard's as an error); with authorization on it needs read."""
    for method in ("GET", "HEAD"):
        r = client.request(method, "/v1/servers")
        assert r.status == 200, r
        assert r.header("Content-Type").startswith("application/json")
        assert r.header("Mutexd-Served-By") is None
    r = client.request("GET", "/v1/servers")
    assert r.json == {"self": {"url": None, "role": "alone"}, "active": None, "servers": []}
    tokens, path = with_a_metrics_token(tmp_path)
    with Server(args=["--auth-tokens", path]) as s:
        c = s.client()
        assert c.request("GET", "/v1/servers").status == 401
        assert c.request("GET", "/v1/servers", headers=bearer("watcher", tokens)).status == 403
        r = c.request("GET", "/v1/servers", headers=bearer("reader"))
        assert r.status == 200 and r.json["self"]["role"] == "alone", r
        c.close()


def test_a_standby_forwards_list_watches_and_events():
    from test_forward import standby, url_of
    port = free_port()
    a = Server(listen="127.0.0.1:%d" % port,
               env={"MUTEXD_FAULT_SERVED_BY": url_of(port)}).start()
    b = standby("forward:" + url_of(port))
    try:
        ca, cb = a.client(), b.client()
        ca.acquire("fw/x", owner="o")
        r = cb.request("GET", "/v1/events")
        assert r.status == 200 and r.header("mutexd-served-by") == url_of(port)
        assert [e["resource"] for e in r.json["events"]] == ["fw/x"]
        index = cb.request("GET", "/v1/resources?prefix=fw/").json["index"]
        t, box = in_background(lambda: b.client().request(
            "GET", "/v1/resources?prefix=fw/&index=%d&wait_ms=10000" % index))
        time.sleep(0.5)
        assert t.is_alive()
        ca.acquire("fw/y", owner="o")
        t.join(5)
        assert [x["resource"] for x in box["answer"].json["resources"]] == ["fw/x", "fw/y"]
        assert cb.request("GET", "/v1/whoami").status == 200  # answered by B itself
        ca.close()
        cb.close()
    finally:
        b.stop()
        a.stop()


def test_metrics_of_hold_and_wait_times_and_late_renewals(server, client):
    import re

    def count(m, name, kind):
        return int(re.search(r'^%s_count\{kind="%s"\} (\d+)$' % (name, kind), m, re.M).group(1))
    a = client.acquire("mt/x", owner="a", ttl_ms=60000).json
    t, box = in_background(lambda: server.client().acquire("mt/x", owner="b", wait_ms=10000))
    time.sleep(0.4)
    client.release("mt/x", a["lease_id"])
    t.join(5)
    assert box["answer"].status == 200
    m = client.request("GET", "/metrics").body
    assert count(m, "mutexd_lease_held_seconds", "exclusive") == 1
    assert count(m, "mutexd_acquire_wait_seconds", "exclusive") == 2
    # The waiter waited at least 0.3 s: above the 0.1 s bucket.
    le = re.search(r'^mutexd_acquire_wait_seconds_bucket\{kind="exclusive",le="0.1"\} (\d+)$', m,
                   re.M)
    assert le and int(le.group(1)) == 1, m
    assert client.renew("mt/x", a["lease_id"]).status == 409
    m = client.request("GET", "/metrics").body
    assert re.search(r"^mutexd_renewals_lost_total 1$", m, re.M)


def test_a_list_watch_woken_by_a_change_shows_it(tmp_path):
    """The wake comes once the change is committed: the list read after it shows the
    change (a hundred tries, with several HTTP threads: an early wake, on another thread
    than the commit's, showed the old list now and then)."""
    server = Server(data_dir=str(tmp_path / "d"), args=["--threads", "4"]).start()
    client, other = server.client(), server.client()
    for i in range(100):
        prefix = "seen/%d/" % i
        index = client.request("GET", "/v1/resources?prefix=" + prefix).json["index"]
        t, box = in_background(lambda: other.request(
            "GET", "/v1/resources?prefix=%s&index=%d&wait_ms=10000" % (prefix, index)))
        time.sleep(0.05)
        client.acquire(prefix + "x", owner="o")
        t.join(5)
        r = box["answer"]
        assert r.status == 200, r
        assert [x["resource"] for x in r.json["resources"]] == [prefix + "x"], (i, r.json)
    other.close()
    client.close()
    server.stop()
