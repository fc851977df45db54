"""Counting semaphores and shared leases (docs/api.md, "Semaphores and shared leases")
against a real server: limit and shared on acquire and lock, the holders of a resource,
409 limit_mismatch, and break of one lease by its id."""

from __future__ import annotations

import threading
import time
import uuid

import pytest

import mutexd


@pytest.fixture
def third(server):
    """A third independent client."""
    c = mutexd.Client(server.url, timeout=5.0)
    yield c
    c.close()


def _until(cond, timeout=5.0):
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.02)


def _in_thread(fn, *args, **kw):
    """Runs fn in a thread; returns (thread, result list), the list getting the value or
    the exception."""
    out: list = []

    def run():
        try:
            out.append(fn(*args, **kw))
        except mutexd.MutexdError as exc:
            out.append(exc)

    t = threading.Thread(target=run)
    t.start()
    return t, out


# -- counting semaphores ------------------------------------------------------------------


def test_a_semaphore_grants_limit_leases_then_lease_held(client, other, third, name):
    leases = [c.acquire(name, owner="w%d" % i, ttl=10 + i, limit=3)
              for i, c in enumerate((client, other, third))]
    assert [(x.limit, x.shared) for x in leases] == [(3, False)] * 3
    assert len({x.lease_id for x in leases}) == 3
    tokens = [x.fencing_token for x in leases]
    assert tokens == sorted(tokens) and len(set(tokens)) == 3
    with pytest.raises(mutexd.LeaseHeld) as info:
        client.acquire(name, owner="w3", limit=3)
    err = info.value
    # Of several holders, the one whose lease ends first.
    assert err.holder is not None and err.holder.owner == "w0"
    assert err.holder.fencing_token == leases[0].fencing_token
    assert err.retry_after is not None and 0 < err.retry_after <= 10
    # Releasing one lease frees one place.
    other.release(leases[1])
    fourth = client.acquire(name, owner="w3", limit=3)
    assert fourth.limit == 3 and fourth.fencing_token > tokens[-1]
    # Each lease renews on its own and keeps its limit.
    renewed = third.renew(leases[2], ttl=20)
    assert (renewed.fencing_token, renewed.limit, renewed.ttl_ms) == (tokens[2], 3, 20000)


def test_limit_mismatch_names_the_limit_in_force(client, other, name):
    first = client.acquire(name, owner="w0", limit=3, ttl=10)
    with pytest.raises(mutexd.LimitMismatch) as info:
        other.acquire(name, owner="w1", limit=2)
    err = info.value
    assert isinstance(err, mutexd.Conflict) and not isinstance(err, mutexd.LeaseHeld)
    assert (err.status, err.code, err.limit) == (409, "limit_mismatch", 3)
    # An acquire without a limit names 1: told at once, though a place is free.
    with pytest.raises(mutexd.LimitMismatch) as info:
        other.acquire(name, owner="w1")
    assert info.value.limit == 3
    # A retry with its own lease id gets its lease back only under the same limit.
    again = client.acquire(name, owner="w0", limit=3, ttl=10, lease_id=first.lease_id)
    assert again.fencing_token == first.fencing_token
    with pytest.raises(mutexd.LimitMismatch):
        client.acquire(name, owner="w0", limit=4, lease_id=first.lease_id)
    # The limit belongs to the resource while it has holders only.
    client.release(first)
    assert other.acquire(name, owner="w1", limit=2).limit == 2


def test_limit_mismatch_is_told_at_once_even_to_a_waiting_acquire(client, other, name):
    client.acquire(name, owner="w0", ttl=10)  # an exclusive lease: limit 1
    start = time.monotonic()
    with pytest.raises(mutexd.LimitMismatch) as info:
        other.acquire(name, owner="w1", limit=2, wait=5)
    assert time.monotonic() - start < 2
    assert info.value.limit == 1
    assert client.get(name).waiters == 0


def test_the_holders_of_a_semaphore_oldest_grant_first(client, other, third, name):
    free = client.get(name)
    assert (free.limit, free.holders, free.holder) == (1, [], None)
    leases = [c.acquire(name, owner="w%d" % i, ttl=5 + i, limit=3, metadata={"i": i})
              for i, c in enumerate((client, other, third))]
    state = client.get(name)
    assert state.held and state.state == "held" and state.limit == 3 and state.waiters == 0
    assert [h.owner for h in state.holders] == ["w0", "w1", "w2"]
    assert [h.fencing_token for h in state.holders] == [x.fencing_token for x in leases]
    assert [h.ttl_ms for h in state.holders] == [5000, 6000, 7000]
    assert [h.metadata for h in state.holders] == [{"i": 0}, {"i": 1}, {"i": 2}]
    assert not any(h.shared for h in state.holders)
    assert all(0 < h.expires_in_ms <= h.ttl_ms and h.acquired_at for h in state.holders)
    assert not any(hasattr(h, "lease_id") for h in state.holders)
    assert state.holder == state.holders[0]
    # A list entry is the same state.
    (listed,) = list(client.list(prefix=name))
    assert listed.limit == 3
    assert [h.fencing_token for h in listed.holders] == [x.fencing_token for x in leases]
    # A release leaves the others in their order.
    other.release(leases[1])
    assert [h.owner for h in client.get(name).holders] == ["w0", "w2"]


# -- shared leases --------------------------------------------------------------------------


def test_readers_hold_together_and_a_writer_waits_for_them(client, other, third, name):
    r1 = client.acquire(name, owner="r1", shared=True, ttl=10)
    r2 = other.acquire(name, owner="r2", shared=True, ttl=10)
    assert (r1.shared, r1.limit, r2.shared) == (True, 1, True)
    state = client.get(name)
    assert [(h.owner, h.shared) for h in state.holders] == [("r1", True), ("r2", True)]
    assert state.limit == 1
    # An exclusive acquire that does not wait is told at once.
    with pytest.raises(mutexd.LeaseHeld):
        third.acquire(name, owner="w", ttl=10)
    writer, w_out = _in_thread(third.acquire, name, owner="w", ttl=10, wait=10)
    _until(lambda: client.get(name).waiters == 1)
    # A reader arriving after the writer queues behind it (it does not starve the writer).
    reader, r_out = _in_thread(mutexd.Client(client.url, timeout=5.0).acquire, name,
                               owner="r3", shared=True, ttl=10, wait=10)
    _until(lambda: client.get(name).waiters == 2)
    client.release(r1)
    time.sleep(0.2)
    assert w_out == []  # r2 still reads
    other.release(r2)
    writer.join(5)
    w = w_out[0]
    assert isinstance(w, mutexd.Lease) and w.shared is False
    state = client.get(name)
    assert [(h.owner, h.shared) for h in state.holders] == [("w", False)]
    assert state.waiters == 1 and r_out == []
    third.release(w)
    reader.join(5)
    r3 = r_out[0]
    assert isinstance(r3, mutexd.Lease) and r3.shared and r3.fencing_token > w.fencing_token


def test_a_writer_holds_alone(client, other, name):
    w = client.acquire(name, owner="w", ttl=10)
    with pytest.raises(mutexd.LeaseHeld) as info:
        other.acquire(name, owner="r", shared=True)
    assert info.value.holder is not None and info.value.holder.owner == "w"
    client.release(w)
    assert other.acquire(name, owner="r", shared=True).shared


def test_bad_limits_and_shared_with_a_limit_are_invalid_field(client, name):
    for kw, field in (({"shared": True, "limit": 2}, "shared"), ({"limit": 0}, "limit"),
                      ({"limit": -1}, "limit")):
        with pytest.raises(mutexd.InvalidRequest) as info:
            client.acquire(name, **kw)
        assert (info.value.code, info.value.field) == ("invalid_field", field), kw
    assert client.acquire(name, shared=True, limit=1).shared


def test_a_limit_above_max_holders_is_invalid(start_server, name):
    server = start_server("--max-holders", "4")
    with mutexd.Client(server.url, timeout=5.0) as c:
        assert c.acquire(name, limit=4).limit == 4
        with pytest.raises(mutexd.InvalidRequest) as info:
            c.acquire(name + "b", limit=5)
        assert (info.value.code, info.value.field) == ("invalid_field", "limit")


# -- break one lease ------------------------------------------------------------------------


def test_break_ends_only_the_lease_named(client, other, third, name):
    leases = [c.acquire(name, owner="w%d" % i, ttl=10, limit=3)
              for i, c in enumerate((client, other, third))]
    assert client.break_lease(name, lease_id=leases[1].lease_id, reason="stuck") is True
    assert [h.owner for h in client.get(name).holders] == ["w0", "w2"]
    with pytest.raises(mutexd.LeaseLost):
        other.renew(leases[1])
    assert client.renew(leases[0]).fencing_token == leases[0].fencing_token
    # That lease holds nothing now, nor does a lease id never granted.
    assert client.break_lease(name, lease_id=leases[1].lease_id) is False
    assert client.break_lease(name, lease_id=str(uuid.uuid4())) is False
    # Without a lease id, every lease ends.
    assert client.break_lease(name) is True
    state = client.get(name)
    assert (state.state, state.holders, state.holder) == ("free", [], None)


def test_break_one_reader_grants_the_waiting_writer_when_it_was_the_last(client, other, name):
    r = client.acquire(name, owner="r", shared=True, ttl=30)
    t, out = _in_thread(other.acquire, name, owner="w", ttl=10, wait=10)
    _until(lambda: client.get(name).waiters == 1)
    assert other.break_lease(name, lease_id=r.lease_id) is True
    t.join(5)
    assert isinstance(out[0], mutexd.Lease) and out[0].owner == "w"


# -- lock -----------------------------------------------------------------------------------


def test_lock_takes_a_place_of_a_semaphore_and_renews_it(client, other, third, name):
    with client.lock(name, limit=2, ttl=1.5) as a, other.lock(name, limit=2, ttl=1.5) as b:
        assert (a.limit, a.shared, b.limit) == (2, False, 2)
        with pytest.raises(mutexd.LeaseHeld):
            with third.lock(name, limit=2, wait=0.2):
                pass
        with pytest.raises(mutexd.LimitMismatch) as info:
            with third.lock(name, wait=0.2):
                pass
        assert info.value.limit == 2
        time.sleep(2.0)  # more than a TTL: both are renewed, each on its own
        assert a.renewals > 0 and b.renewals > 0
        assert not a.lost.is_set() and not b.lost.is_set()
        assert a.fencing_token != b.fencing_token
        assert len(client.get(name).holders) == 2
    assert client.get(name).state == "free"


def test_lock_shared(client, other, name):
    with client.lock(name, shared=True) as a, other.lock(name, shared=True, wait=1) as b:
        assert a.shared and b.shared and a.limit == 1
        assert [h.shared for h in client.get(name).holders] == [True, True]
    assert client.get(name).state == "free"
