"""Watching a prefix, the recent events and whoami, against a real server; and the
answers' decoding, against a scripted one. The contract:
docs/api.md, "Watching many resources, and recent events", and "The dashboard" (whoami)."""

from __future__ import annotations

import hashlib
import logging
import os
import threading
import time

import pytest

import mutexd
from test_client_stub import Stub


def later(delay, fn, *args, **kwargs):
    t = threading.Timer(delay, fn, args=args, kwargs=kwargs)
    t.start()
    return t


def test_watch_prefix_yields_on_a_change_under_it_and_not_elsewhere(client, other, name):
    first_lease = other.acquire(name + "/a", owner="alice", ttl=10)
    it = client.watch_prefix(name + "/", wait=5)
    first = next(it)
    assert isinstance(first, mutexd.ResourceList)
    assert first.names() == [name + "/a"] and len(first) == 1
    assert first.resources[0].holders[0].owner == "alice"
    # A change elsewhere (and under a longer name that only shares the text) wakes nothing;
    # the grant under the prefix does.
    later(0.3, other.acquire, name + "-elsewhere")
    later(0.9, other.acquire, name + "/b", owner="bob", limit=2)
    start = time.monotonic()
    second = next(it)
    assert 0.8 < time.monotonic() - start < 4
    assert second.names() == [name + "/a", name + "/b"]
    assert second.index > first.index
    assert second.resources[1].limit == 2
    # A release: the resource leaves the list.
    later(0.3, other.release, first_lease)
    third = next(it)
    assert third.names() == [name + "/b"] and third.index > second.index
    it.close()


def test_watch_list_waits_and_returns_the_index(client, other, name):
    now = client.watch_list(name + "/", 0, 0)
    assert now.resources == [] and now.index >= 0
    start = time.monotonic()
    same = client.watch_list(name + "/", now.index, 0.5)
    assert 0.4 < time.monotonic() - start < 3
    assert same.resources == [] and same.index >= now.index
    later(0.3, other.acquire, name + "/x")
    start = time.monotonic()
    changed = client.watch_list(name + "/", same.index, 10)
    assert 0.2 < time.monotonic() - start < 5 and changed.index > same.index
    if not changed.names():
        # The server may answer a moment before the grant reads in the list.
        time.sleep(0.1)
        changed = client.watch_list(name + "/", same.index, 0)
    assert changed.names() == [name + "/x"]
    # list_page carries the index too.
    assert client.list_page(name + "/").index >= changed.index
    with pytest.raises(ValueError):
        client.watch_list(name, -1)


def test_watch_prefix_from_an_index_yields_only_changes(client, other, name):
    base = client.watch_list(name + "/", 0, 0)
    it = client.watch_prefix(name + "/", wait=5, index=base.index)
    later(0.3, other.acquire, name + "/late")
    got = next(it)
    assert got.names() == [name + "/late"]
    it.close()


def test_events_in_order_with_next_and_after(client, other, name):
    lease = client.acquire(name + "/a", owner="alice", ttl=5)
    client.renew(lease)
    client.release(lease)
    other.acquire(name + "/b", owner="bob", shared=True)
    evs = list(client.events(prefix=name + "/"))
    assert [(e.resource, e.type, e.owner) for e in evs] == [
        (name + "/a", "granted", "alice"), (name + "/a", "renewed", "alice"),
        (name + "/a", "released", "alice"), (name + "/b", "granted", "bob")]
    assert [e.index for e in evs] == sorted(e.index for e in evs)
    assert evs[0].fencing_token == lease.fencing_token and evs[0].limit == 1
    assert evs[3].shared is True and evs[0].shared is False
    assert evs[0].at is not None and evs[0].at.tzinfo is not None
    # after, and pages of one.
    rest = list(client.events(prefix=name + "/", after=evs[0].index, limit=1))
    assert [e.index for e in rest] == [e.index for e in evs[1:]]
    page = client.events_page(after=evs[1].index, prefix=name + "/", limit=1)
    assert isinstance(page, mutexd.EventPage)
    assert [e.index for e in page.events] == [evs[2].index]
    assert page.next == evs[2].index and page.truncated is False
    assert list(client.events(prefix=name + "/", after=evs[3].index)) == []


def test_events_follow_receives_a_later_event(client, other, name):
    client.acquire(name + "/first")
    got = []
    later(0.5, other.acquire, name + "-not-under-the-prefix")
    later(0.8, other.acquire, name + "/later", owner="later")
    start = time.monotonic()
    for ev in client.events(prefix=name + "/", follow=True, wait=5):
        got.append(ev)
        if len(got) == 2:
            break
    assert 0.7 < time.monotonic() - start < 5
    assert [(e.resource, e.owner) for e in got][1] == (name + "/later", "later")


def test_events_truncated_is_surfaced(start_server, caplog):
    server = start_server("--event-history", "2")
    with mutexd.Client(server.url, timeout=5) as c:
        for i in range(5):
            c.acquire("t/%d" % i)
        page = c.events_page(after=1)
        assert page.truncated is True
        assert [e.resource for e in page.events] == ["t/3", "t/4"]
        assert c.events_page(after=page.next).truncated is False
        # The iterator: on_truncated, else a warning on the mutexd logger.
        gaps = []
        evs = list(c.events(after=1, on_truncated=gaps.append))
        assert gaps == [1] and [e.resource for e in evs] == ["t/3", "t/4"]
        with caplog.at_level(logging.WARNING, logger="mutexd"):
            list(c.events(after=1))
        assert "dropped" in caplog.text
        # Without after, the oldest kept is where it starts: nothing to say.
        gaps = []
        assert len(list(c.events(on_truncated=gaps.append))) == 2 and gaps == []


def test_whoami_with_authorization_off(client):
    who = client.whoami()
    assert who == mutexd.WhoAmI(None, ("read", "write", "admin", "metrics"))
    assert who.has_scope("admin")


def test_whoami_with_a_tokens_file(start_server, tmp_path):
    tokens = tmp_path / "tokens"
    lines = []
    for tok, name, scopes, prefix in (("reader-secret", "dashboard", "read", "jobs/"),
                                      ("admin-secret", "operator", "read,write,admin", "")):
        lines.append(("%s sha256:%s %s %s" % (
            name, hashlib.sha256(tok.encode()).hexdigest(), scopes, prefix)).rstrip())
    tokens.write_text("\n".join(lines) + "\n")
    os.chmod(tokens, 0o600)
    server = start_server("--auth-tokens", str(tokens))
    with mutexd.Client(server.url, token="reader-secret") as c:
        who = c.whoami()
        assert who.name == "dashboard" and who.scopes == ("read",)
        assert not who.has_scope("write")
        assert list(c.events(prefix="jobs/")) == []
        with pytest.raises(mutexd.Forbidden):
            list(c.events(prefix="other/"))
    with mutexd.Client(server.url, token="admin-secret") as c:
        assert c.whoami() == mutexd.WhoAmI("operator", ("read", "write", "admin"))
    with mutexd.Client(server.url) as c:
        with pytest.raises(mutexd.Unauthorized):
            c.whoami()


# ---- against a scripted server -----------------------------------------------------------

@pytest.fixture
def stub():
    s = Stub()
    yield s
    s.close()


BIG = 2**63 + 5


def test_events_decode_big_integers_and_send_the_query(stub):
    stub.script = [(200, {}, {"events": [
        {"index": BIG, "at": "2026-01-15T09:30:00.000Z", "resource": "jobs/a",
         "type": "expired", "owner": "w", "fencing_token": BIG + 1, "shared": False,
         "limit": 3}], "next": BIG, "truncated": False})]
    with mutexd.Client(stub.url) as c:
        page = c.events_page(after=BIG - 1, prefix="jobs/", limit=10, wait=2)
    ev = page.events[0]
    assert (ev.index, ev.fencing_token, ev.type, ev.limit) == (BIG, BIG + 1, "expired", 3)
    assert page.next == BIG
    path = stub.requests[0][1]
    assert path.startswith("/v1/events?")
    for part in ("after=%d" % (BIG - 1), "prefix=jobs/", "limit=10", "wait_ms=2000"):
        assert part in path


def test_watch_list_sends_index_and_wait(stub):
    stub.script = [(200, {}, {"index": BIG, "resources": [], "next_cursor": None})]
    with mutexd.Client(stub.url) as c:
        got = c.watch_list("jobs/", BIG - 1, 1.5)
    assert got.index == BIG and got.resources == []
    path = stub.requests[0][1]
    for part in ("prefix=jobs/", "index=%d" % (BIG - 1), "wait_ms=1500"):
        assert part in path


@pytest.mark.parametrize("body", [
    {"events": "x", "next": 1},
    {"events": [], "next": ""},  # a position is a string, never an empty one
    {"events": [], "next": 1.5},
    {"events": [{"index": 1, "resource": "a", "type": 3, "fencing_token": 1}], "next": 1},
    {"events": [], "next": 1, "truncated": "yes"},
])
def test_malformed_events_are_protocol_errors(stub, body):
    stub.script = [(200, {}, body)]
    with mutexd.Client(stub.url) as c:
        with pytest.raises(mutexd.ProtocolError):
            c.events_page()


def test_a_list_without_index_cannot_be_watched(stub):
    stub.script = [(200, {}, {"resources": [], "next_cursor": None})]
    with mutexd.Client(stub.url) as c:
        with pytest.raises(mutexd.ProtocolError):
            c.watch_list("jobs/")
