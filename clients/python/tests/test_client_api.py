"""Every method of the client against a real server, and every error answer mapped to its
exception with its fields."""

from __future__ import annotations

import datetime as dt
import http.client
import os
import pickle
import re
import socket
import threading
import time
import uuid

import pytest

import mutexd
from mutexd._http import Transport

UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


# -- acquire ----------------------------------------------------------------------------


def test_acquire_returns_the_lease(client, name):
    before = time.monotonic()
    lease = client.acquire(name, owner="worker-1", ttl=1.5, metadata={"address": "host-a:9000"})
    assert isinstance(lease, mutexd.Lease)
    assert lease.resource == name
    assert UUID.match(lease.lease_id)
    assert lease.owner == "worker-1"
    assert isinstance(lease.fencing_token, int) and lease.fencing_token >= 1
    assert lease.ttl_ms == 1500 and lease.ttl == 1.5
    assert 0 < lease.expires_in_ms <= 1500
    assert lease.expires_in == lease.expires_in_ms / 1000
    assert isinstance(lease.acquired_at, dt.datetime)
    assert lease.acquired_at.tzinfo is not None
    assert lease.renewed_at is None or isinstance(lease.renewed_at, dt.datetime)
    assert lease.metadata == {"address": "host-a:9000"}
    # The deadline counts from when the request was sent, on the monotonic clock.
    assert before + lease.expires_in <= lease.deadline <= time.monotonic() + 1.5


def test_acquire_defaults(client, name):
    lease = client.acquire(name)
    assert lease.owner == "%s:%d" % (socket.gethostname(), os.getpid())
    assert lease.owner == mutexd.default_owner()
    assert lease.ttl_ms == 15000  # the server's default
    assert lease.metadata is None


def test_durations_are_seconds_rounded_to_milliseconds(client, name):
    assert client.acquire(name, ttl=dt.timedelta(seconds=2)).ttl_ms == 2000
    assert client.acquire(name + "b", ttl=0.7504).ttl_ms == 750
    with pytest.raises(ValueError):
        client.acquire(name + "c", ttl=-1)
    with pytest.raises(TypeError):
        client.acquire(name + "c", ttl="15")  # type: ignore[arg-type]


def test_acquire_is_idempotent_under_the_same_lease_id(client, name):
    lease_id = str(uuid.uuid4()).upper()
    first = client.acquire(name, ttl=1, lease_id=lease_id)
    assert first.lease_id == lease_id.lower()
    again = client.acquire(name, ttl=5, lease_id=lease_id, metadata={"n": 2})
    assert again.lease_id == first.lease_id
    assert again.fencing_token == first.fencing_token
    assert again.ttl_ms == 5000
    assert again.metadata == {"n": 2}


def test_lease_held_carries_the_holder_and_retry_after(client, other, name):
    held = client.acquire(name, owner="worker-1", ttl=4)
    with pytest.raises(mutexd.LeaseHeld) as info:
        other.acquire(name, owner="worker-2")
    err = info.value
    assert isinstance(err, mutexd.Conflict) and isinstance(err, mutexd.APIError)
    assert err.status == 409 and err.code == "lease_held"
    assert err.message
    expected = mutexd.LeaseHolder("worker-1", held.fencing_token, err.holder.expires_in_ms)
    assert err.holder == expected
    assert 0 < err.holder.expires_in <= 4
    assert err.retry_after == 4  # whole seconds, rounded up
    assert err.request_id
    assert err.details["holder"]["owner"] == "worker-1"
    # The exception survives pickling with its fields.
    copy = pickle.loads(pickle.dumps(err))
    assert type(copy) is mutexd.LeaseHeld and copy.holder == err.holder and copy.retry_after == 4


def test_acquire_waits_in_the_queue(client, other, name):
    first = client.acquire(name, ttl=10)
    threading.Timer(0.4, client.release, args=(first,)).start()
    start = time.monotonic()
    second = other.acquire(name, owner="waiter", ttl=2, wait=5)
    waited = time.monotonic() - start
    assert 0.3 < waited < 3
    assert second.owner == "waiter"
    assert second.fencing_token > first.fencing_token
    # After a wait, the deadline counts from the answer.
    assert second.deadline > start + 0.3 + 1.5


def test_acquire_wait_runs_out(client, other, name):
    client.acquire(name, ttl=10)
    start = time.monotonic()
    with pytest.raises(mutexd.LeaseHeld) as info:
        other.acquire(name, wait=0.6)
    assert 0.5 < time.monotonic() - start < 3
    assert info.value.holder is not None


def test_too_many_waiters(start_server, name):
    server = start_server("--max-waiters", "1")
    a, b, c = (mutexd.Client(server.url, timeout=5) for _ in range(3))
    try:
        holder = a.acquire(name, ttl=10)
        waiter = threading.Thread(target=lambda: _ignore(b.acquire, name, wait=2))
        waiter.start()
        _until(lambda: a.get(name).waiters == 1)
        with pytest.raises(mutexd.TooManyWaiters) as info:
            c.acquire(name, wait=2)
        assert info.value.status == 429 and info.value.code == "too_many_waiters"
        assert info.value.retry_after is not None
        a.release(holder)
        waiter.join()
    finally:
        for x in (a, b, c):
            x.close()


# -- renew, release, break --------------------------------------------------------------


def test_renew_by_lease_or_by_name(client, name):
    lease = client.acquire(name, ttl=1, metadata={"v": 1})
    time.sleep(0.2)
    sent = time.monotonic()
    renewed = client.renew(lease)
    assert renewed.lease_id == lease.lease_id
    assert renewed.fencing_token == lease.fencing_token
    assert renewed.ttl_ms == 1000 and renewed.expires_in_ms == 1000
    assert renewed.metadata == {"v": 1}  # kept when not given
    assert renewed.renewed_at is not None
    assert sent + 1.0 <= renewed.deadline <= time.monotonic() + 1.0
    assert renewed.deadline > lease.deadline
    changed = client.renew(name, lease.lease_id, ttl=3, metadata={"v": 2})
    assert changed.ttl_ms == 3000 and changed.metadata == {"v": 2}
    with pytest.raises(TypeError):
        client.renew(name)


def test_renew_after_expiry_when_nothing_was_granted(client, name):
    lease = client.acquire(name, ttl=0.5)
    time.sleep(0.8)
    assert client.get(name).state == "free"
    renewed = client.renew(lease)
    assert renewed.fencing_token == lease.fencing_token
    assert client.get(name).held


def test_renew_a_broken_lease_is_lease_lost(client, other, name):
    lease = client.acquire(name, ttl=5)
    assert other.break_lease(name, reason="failing over by hand") is True
    with pytest.raises(mutexd.LeaseLost) as info:
        client.renew(lease)
    assert info.value.status == 409 and info.value.code == "lease_lost"
    assert isinstance(info.value, mutexd.Conflict)


def test_release(client, other, name):
    lease = client.acquire(name, ttl=5)
    assert client.release(lease) is None
    assert client.get(name).state == "free"
    with pytest.raises(mutexd.LeaseLost):
        client.release(lease)
    # Releasing someone else's lease is refused and the holder keeps it.
    mine = other.acquire(name, ttl=5)
    with pytest.raises(mutexd.LeaseLost):
        client.release(name, lease.lease_id)
    assert client.get(name).holder.fencing_token == mine.fencing_token


def test_release_grants_the_next_waiter_at_once(client, other, name):
    lease = client.acquire(name, ttl=30)
    got = []
    t = threading.Thread(target=lambda: got.append(other.acquire(name, wait=10)))
    t.start()
    _until(lambda: client.get(name).waiters == 1)
    start = time.monotonic()
    client.release(lease)
    t.join()
    assert time.monotonic() - start < 1
    assert got[0].fencing_token > lease.fencing_token


def test_break_lease(client, other, name):
    assert client.break_lease(name) is False  # nothing to break
    lease = other.acquire(name, ttl=30)
    assert client.break_lease(name, reason="wedged") is True
    assert client.get(name).state == "free"
    with pytest.raises(mutexd.LeaseLost):
        other.renew(lease)


# -- get, watch, list -------------------------------------------------------------------


def test_get(client, other, name):
    free = client.get(name)
    assert free == mutexd.ResourceState(name, "free", free.index, None, 0)
    assert not free.held
    lease = client.acquire(name, owner="w1", ttl=5, metadata={"a": 1})
    t = threading.Thread(target=lambda: _ignore(other.acquire, name, wait=1))
    t.start()
    _until(lambda: client.get(name).waiters == 1)
    state = client.get(name)
    assert state.held and state.state == "held"
    assert state.index > free.index
    assert state.waiters == 1
    h = state.holder
    assert isinstance(h, mutexd.Holder)
    assert (h.owner, h.fencing_token, h.ttl_ms) == ("w1", lease.fencing_token, 5000)
    assert h.metadata == {"a": 1}
    assert 0 < h.expires_in <= 5 and h.ttl == 5
    assert isinstance(h.acquired_at, dt.datetime)
    assert not hasattr(h, "lease_id")
    t.join()


def test_get_a_hierarchical_name_and_an_action_like_name(client, name):
    client.acquire(name + "/acquire", ttl=5)
    assert client.get(name + "/acquire").held
    assert not client.get(name).held


def test_watch(client, other, name):
    state = client.get(name)
    # A stale index answers at once.
    start = time.monotonic()
    client.acquire(name, ttl=5)
    changed = client.watch(name, state.index, wait=5)
    assert time.monotonic() - start < 1
    assert changed.held and changed.index > state.index
    # No change: the answer comes when the wait runs out, unchanged.
    start = time.monotonic()
    same = client.watch(name, changed.index, wait=0.5)
    assert 0.4 < time.monotonic() - start < 3
    assert same.index == changed.index and same.held
    # A change wakes the watcher at once.
    threading.Timer(0.3, other.break_lease, args=(name,)).start()
    start = time.monotonic()
    broken = client.watch(name, changed.index, wait=10)
    assert 0.2 < time.monotonic() - start < 3
    assert broken.state == "free" and broken.index > changed.index


def test_list_iterates_over_pages(client, name):
    names = ["%s/job-%02d" % (name, i) for i in range(7)]
    for n in reversed(names):
        client.acquire(n, ttl=10)
    client.acquire(name + "-elsewhere", ttl=10)
    listed = list(client.list(prefix=name + "/", limit=3))
    assert [s.resource for s in listed] == names
    assert all(s.held and s.holder is not None for s in listed)
    page = client.list_page(prefix=name + "/", limit=3)
    assert [s.resource for s in page.resources] == names[:3]
    assert page.next_cursor is not None
    page2 = client.list_page(prefix=name + "/", limit=3, cursor=page.next_cursor)
    assert [s.resource for s in page2.resources] == names[3:6]
    assert set(s.resource for s in client.list()) >= set(names) | {name + "-elsewhere"}
    assert list(client.list(prefix=name + "/nothing")) == []


# -- error answers ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "call, code, field",
    [
        (lambda c, n: c.acquire(n + "//x"), "invalid_resource", None),
        (lambda c, n: c.acquire("a b"), "invalid_resource", None),
        (lambda c, n: c.get("x?index=1"), "invalid_resource", None),
        (lambda c, n: c.acquire(n, ttl=0.1), "invalid_ttl", "ttl_ms"),
        (lambda c, n: c.acquire(n, wait=301), "invalid_wait", "wait_ms"),
        (lambda c, n: c.acquire(n, lease_id="not-a-uuid"), "invalid_lease_id", "lease_id"),
        (lambda c, n: c.acquire(n, owner=""), "invalid_field", "owner"),
        (lambda c, n: c.acquire(n, owner="a\nb"), "invalid_field", "owner"),
        (lambda c, n: c.acquire(n, metadata={"x": "y" * 5000}), "invalid_field", "metadata"),
        (lambda c, n: c.renew(n, "nope"), "invalid_lease_id", "lease_id"),
        (lambda c, n: c.watch(n, 0, wait=301), "invalid_wait", "wait_ms"),
        (lambda c, n: c.list_page(limit=0), "invalid_field", "limit"),
        (lambda c, n: c.list_page(limit=1001), "invalid_field", "limit"),
    ],
)
def test_bad_input_is_invalid_request_with_its_field(client, name, call, code, field):
    with pytest.raises(mutexd.InvalidRequest) as info:
        call(client, name)
    err = info.value
    assert err.status == 400 and err.code == code and err.field == field
    assert err.message and err.request_id


@pytest.mark.parametrize(
    "body, code, field",
    [
        ({"owner": "x", "ttl": 1000}, "unknown_field", "ttl"),
        ({"ttl_ms": 1000}, "missing_field", "owner"),
        ([1, 2], "invalid_json", None),
    ],
)
def test_bodies_the_methods_never_send(client, name, body, code, field):
    with pytest.raises(mutexd.InvalidRequest) as info:
        client._transports[0].request("POST", "/v1/resources/%s/acquire" % name, body, timeout=5)
    assert (info.value.code, info.value.field) == (code, field)


def test_body_too_large(client, name):
    with pytest.raises(mutexd.BodyTooLarge) as info:
        client.acquire(name, metadata={"x": "y" * 70000})
    assert info.value.status == 413 and info.value.code == "body_too_large"
    assert client.get(name).state == "free"  # the client recovers from the closed connection


def test_not_found_and_method_not_allowed(server, client, name):
    with mutexd.Client(server.url + "/not-mutexd") as wrong:
        with pytest.raises(mutexd.NotFound) as info:
            wrong.get(name)
    assert info.value.status == 404 and info.value.code == "not_found"
    with pytest.raises(mutexd.NotFound):
        client._transports[0].request("POST", "/v1/resources/%s/lock" % name, {}, timeout=5)
    with pytest.raises(mutexd.MethodNotAllowed) as info2:
        client._transports[0].request("DELETE", "/v1/resources/%s" % name, None, timeout=5)
    assert info2.value.status == 405 and info2.value.code == "method_not_allowed"
    assert "GET" in (info2.value.allow or "")


def test_unsupported_media_type(server, name):
    # The client always sends JSON; this checks the mapping of the server's real answer.
    host, port = server.address.rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=5)
    conn.request("POST", "/v1/resources/%s/acquire" % name, body=b"owner=x",
                 headers={"Content-Type": "text/plain"})
    resp = conn.getresponse()
    raw = resp.read()
    conn.close()
    with pytest.raises(mutexd.UnsupportedMediaType) as info:
        Transport._decode("POST", "", resp, raw)
    assert info.value.status == 415 and info.value.code == "unsupported_media_type"


def test_unavailable_while_shutting_down(start_server, name):
    server = start_server()
    a, b = mutexd.Client(server.url), mutexd.Client(server.url)
    try:
        a.acquire(name, ttl=30)
        errors = []
        t = threading.Thread(target=lambda: _catch(errors, b.acquire, name, wait=20))
        t.start()
        _until(lambda: a.get(name).waiters == 1)
        assert server.terminate() == 0
        t.join()
        err = errors[0]
        assert isinstance(err, mutexd.Unavailable)
        assert err.status == 503 and err.code == "unavailable"
        assert err.reason and err.retry_after is not None and err.retry_after >= 0
        # Now nothing listens: a transport error, distinct from any answer.
        with pytest.raises(mutexd.TransportError) as info:
            a.get(name)
        assert not isinstance(info.value, mutexd.APIError)
        assert isinstance(info.value.__cause__, OSError)
    finally:
        a.close()
        b.close()


# -- transport --------------------------------------------------------------------------


def test_connections_are_kept_alive_and_idle_closes_are_survived(start_server, name):
    server = start_server("--idle-timeout-ms", "1000")
    with mutexd.Client(server.url) as c:
        for _ in range(5):
            c.get(name)
        assert len(c._transports[0]._idle) == 1  # one connection served all five
        time.sleep(1.5)  # the server closes the idle connection
        lease = c.acquire(name, ttl=5)  # sent again on a new connection
        assert c.get(name).holder.fencing_token == lease.fencing_token


def test_one_client_from_many_threads(client, name):
    errors = []
    tokens = []

    def work(i):
        try:
            for j in range(10):
                lease = client.acquire("%s/%d-%d" % (name, i, j), ttl=5)
                tokens.append(lease.fencing_token)
                client.get(lease.resource)
                client.release(lease)
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert len(set(tokens)) == 80


def test_client_url_and_argument_checks(server):
    with pytest.raises(ValueError):
        mutexd.Client("ftp://127.0.0.1:1")
    with pytest.raises(ValueError):
        mutexd.Client("http://127.0.0.1:1", ca_file="a", ssl_context=object())  # type: ignore
    c = mutexd.Client(server.url + "/")
    assert c.url == server.url
    with pytest.raises(ValueError):
        c.get("")
    c.close()
    with pytest.raises(mutexd.TransportError):
        c.get("x")


# -- helpers ----------------------------------------------------------------------------


def _until(cond, timeout=5.0):
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.02)


def _ignore(fn, *args, **kw):
    try:
        fn(*args, **kw)
    except mutexd.MutexdError:
        pass


def _catch(errors, fn, *args, **kw):
    try:
        fn(*args, **kw)
    except Exception as exc:
        errors.append(exc)
