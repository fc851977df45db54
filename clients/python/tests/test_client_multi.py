"""Several resources at once (docs/api.md, "Several resources at once") against a real
server: acquire_many all or none, renew_many and release_many, client.lock_many renewing
the set in the background and losing it when one lease of it is broken, and the ordered
helper client.lock_ordered (one lock per resource, in name order, what was taken given
back when one fails)."""

from __future__ import annotations

import threading
import time
import uuid

import pytest

import mutexd

TTL = 1.5  # the renewer sends a renewal every 0.5 s


@pytest.fixture
def names() -> list[str]:
    """Three resource names of the test's own."""
    base = "tests/%s" % uuid.uuid4().hex[:12]
    return ["%s/%s" % (base, n) for n in ("alice", "bob", "carol")]


def holder_token(client: mutexd.Client, name: str):
    state = client.get(name)
    return state.holder.fencing_token if state.held else None


# -- the low-level calls ------------------------------------------------------------------


def test_acquire_many_grants_every_lease_under_one_id_each_with_its_token(client, other, names):
    leases = client.acquire_many(names, owner="mover", ttl=10, metadata={"job": 7})
    assert all(isinstance(x, mutexd.Lease) for x in leases)
    assert [x.resource for x in leases] == names  # in the order given
    assert len({x.lease_id for x in leases}) == 1
    tokens = [x.fencing_token for x in leases]
    assert len(set(tokens)) == 3
    assert all(x.owner == "mover" and x.ttl == 10 and x.metadata == {"job": 7} for x in leases)
    assert all(0 < x.deadline - time.monotonic() <= 10 for x in leases)
    # Each resource is held by its own lease, with its own token.
    assert [holder_token(other, n) for n in names] == tokens
    # Retried with the same lease id and names: the same leases back.
    again = client.acquire_many(names, owner="mover", ttl=10, lease_id=leases[0].lease_id)
    assert [x.fencing_token for x in again] == tokens
    # Each is its own lease too: renewed and released on its own with the shared id.
    assert client.renew(leases[1]).fencing_token == tokens[1]
    client.release(leases[2])
    assert other.get(names[2]).state == "free"


def test_acquire_many_is_all_or_none(client, other, names):
    held = other.acquire(names[1], owner="someone", ttl=10)
    with pytest.raises(mutexd.LeaseHeld) as info:
        client.acquire_many(names, ttl=10)
    err = info.value
    assert (err.status, err.code) == (409, "lease_held")
    assert err.resource == names[1]  # the first held, in the order given
    assert err.holder is not None and err.holder.fencing_token == held.fencing_token
    assert err.retry_after is not None and 0 < err.retry_after <= 10
    # Nothing was granted: the other names are free, the held one still the other's.
    assert other.get(names[0]).state == "free"
    assert other.get(names[2]).state == "free"
    assert holder_token(other, names[1]) == held.fencing_token


def test_acquire_many_waits_for_every_resource(client, other, names):
    held = other.acquire(names[0], ttl=10)
    threading.Timer(0.5, other.release, args=(held,)).start()
    start = time.monotonic()
    leases = client.acquire_many(names[:2], ttl=10, wait=5)
    assert 0.3 < time.monotonic() - start < 4
    assert leases[0].fencing_token > held.fencing_token
    client.release_many(leases)


def test_renew_many_and_release_many(client, other, names):
    leases = client.acquire_many(names, ttl=2)
    tokens = [x.fencing_token for x in leases]
    time.sleep(0.5)
    renewed = client.renew_many(leases, ttl=10)
    assert [x.fencing_token for x in renewed] == tokens
    assert all(x.ttl_ms == 10000 and x.expires_in_ms > 9000 for x in renewed)
    # By names and lease id too; a lost lease is named, the others ARE renewed.
    assert other.break_lease(names[1]) is True
    with pytest.raises(mutexd.LeaseLost) as info:
        client.renew_many(names, leases[0].lease_id, ttl=20)
    assert info.value.resources == [names[1]] and info.value.resource == names[1]
    for name in (names[0], names[2]):
        assert other.get(name).holder.ttl_ms == 20000
    # A release releases what it still holds and names what it did not.
    with pytest.raises(mutexd.LeaseLost) as info:
        client.release_many(leases)
    assert info.value.resources == [names[1]]
    assert all(other.get(n).state == "free" for n in names)
    # All held: nothing to say.
    again = client.acquire_many(names[:2])
    client.release_many(names[:2], again[0].lease_id)
    assert all(other.get(n).state == "free" for n in names[:2])


def test_the_names_are_checked(client, names):
    with pytest.raises(TypeError):
        client.acquire_many("tests/one-name")
    with pytest.raises(ValueError):
        client.acquire_many([])
    with pytest.raises(mutexd.InvalidRequest) as info:
        client.acquire_many([names[0], names[0]])
    assert info.value.field == "resources"
    leases = client.acquire_many(names[:2])
    other_set = client.acquire_many(names[2:] + [names[0] + "x"])
    with pytest.raises(ValueError):  # two lease ids
        client.renew_many([leases[0], other_set[0]])
    client.release_many(leases)
    client.release_many(other_set)


# -- lock_many ------------------------------------------------------------------------------


def test_lock_many_renews_the_set_and_releases_it(client, other, names):
    pair = names[:2]
    with client.lock_many(pair, ttl=TTL, wait=1) as leases:
        assert isinstance(leases, mutexd.HeldLeases)
        assert leases.resources == tuple(pair) and len(leases) == 2
        tokens = leases.fencing_tokens
        assert list(tokens) == pair and len(set(tokens.values())) == 2
        assert leases[pair[0]].fencing_token == tokens[pair[0]]
        assert leases[1].resource == pair[1]
        assert [x.resource for x in leases] == pair
        start = time.monotonic()
        while time.monotonic() - start < 4 * TTL:
            time.sleep(0.25)
            assert not leases.lost.is_set()
            assert 0 < leases.expires_in <= TTL
            assert {n: holder_token(other, n) for n in pair} == tokens
        assert leases.renewals >= 8  # about one every 0.5 s, of the whole set
        assert leases.fencing_tokens == tokens
        assert all(x.renewed_at is not None for x in leases)
        for n in pair:
            with pytest.raises(mutexd.LeaseHeld):
                other.acquire(n)
        leases.check()  # does not raise
    # Released on exit, both.
    assert [other.get(n).state for n in pair] == ["free", "free"]
    assert not leases.lost.is_set()


def test_lock_many_is_lost_when_one_lease_of_the_set_is_broken(client, other, names):
    fired = []
    with client.lock_many(names, ttl=TTL) as leases:
        leases.on_lost(lambda: fired.append(leases.lost.is_set()))
        time.sleep(0.2)
        assert other.break_lease(names[2], reason="test") is True
        broken_at = time.monotonic()
        # The next renewal of the set (at most a third of the TTL away) is answered
        # lease_lost, naming the broken one.
        assert leases.lost.wait(TTL / 3 + 0.7)
        assert time.monotonic() - broken_at < TTL / 3 + 0.7
        assert isinstance(leases.error, mutexd.LeaseLost)
        assert leases.error.resources == [names[2]]
        with pytest.raises(mutexd.LeaseLost):
            leases.check()
        assert leases.expires_in == 0
        theirs = other.acquire(names[2], ttl=5)
        # The others are still held (the batch renewal renewed them) until the exit.
        assert other.get(names[0]).held
    assert fired == [True]
    # On exit the set releases what it still held, and leaves the other's lease alone.
    assert other.get(names[0]).state == "free" and other.get(names[1]).state == "free"
    assert holder_token(other, names[2]) == theirs.fencing_token


def test_lock_many_is_lost_when_the_server_dies(start_server, names):
    server = start_server()
    c = mutexd.Client(server.url, timeout=2)
    try:
        with c.lock_many(names[:2], ttl=TTL) as leases:
            time.sleep(0.7)
            assert leases.renewals >= 1
            deadline = leases.deadline
            server.kill()
            assert leases.lost.wait(TTL + 0.5)
            assert deadline - 0.01 <= time.monotonic() < deadline + 0.5
            assert isinstance(leases.error, mutexd.LeaseExpired)
            assert isinstance(leases.last_error, mutexd.TransportError)
    finally:
        c.close()


def test_lock_many_wait_runs_out_and_nothing_is_held(client, other, names):
    held = other.acquire(names[1], ttl=10)
    start = time.monotonic()
    with pytest.raises(mutexd.LeaseHeld) as info:
        with client.lock_many(names, ttl=TTL, wait=0.5):
            pytest.fail("the body must not run")
    assert 0.4 < time.monotonic() - start < 3
    assert info.value.resource == names[1]
    assert info.value.holder.fencing_token == held.fencing_token
    assert other.get(names[0]).state == "free" and other.get(names[2]).state == "free"


def test_lock_many_leaves_no_thread_behind(client, names):
    before = set(threading.enumerate())
    with client.lock_many(names[:2], ttl=TTL):
        time.sleep(0.1)
    time.sleep(0.1)
    left = [t for t in threading.enumerate() if t not in before and t.name.startswith("mutexd")]
    assert left == []


# -- lock_ordered ---------------------------------------------------------------------------


def test_lock_ordered_takes_the_resources_in_name_order(client, other, names):
    given = [names[2], names[0], names[1]]
    with client.lock_ordered(given, ttl=TTL, wait=1) as leases:
        assert isinstance(leases, mutexd.OrderedLeases)
        assert leases.resources == tuple(sorted(given))
        # Taken one by one in that order: each grant's token is larger than the one before.
        tokens = [leases[n].fencing_token for n in sorted(given)]
        assert tokens == sorted(tokens) and len(set(tokens)) == 3
        assert len({x.lease_id for x in leases}) == 3  # each lease its own
        assert all(isinstance(x, mutexd.HeldLease) for x in leases)
        time.sleep(3 * TTL)
        assert not leases.lost.is_set()
        assert all(x.renewals >= 4 for x in leases)
        assert {n: holder_token(other, n) for n in given} == leases.fencing_tokens
        leases.check()
    assert all(other.get(n).state == "free" for n in given)


def test_lock_ordered_gives_back_what_it_took_when_one_fails(client, other, names):
    # names[1] is the second in order: names[0] is taken first, then names[1] fails.
    held = other.acquire(names[1], ttl=10)
    grants = []
    real = client.acquire

    def acquire(resource, *args, **kw):
        lease = real(resource, *args, **kw)
        grants.append(resource)
        return lease

    client.acquire = acquire  # type: ignore[method-assign]
    start = time.monotonic()
    with pytest.raises(mutexd.LeaseHeld) as info:
        with client.lock_ordered(names, ttl=TTL, wait=0.5):
            pytest.fail("the body must not run")
    # The wait bounds the whole; the first was taken, then given back.
    assert time.monotonic() - start < 3
    assert grants == [names[0]]
    assert info.value.holder.fencing_token == held.fencing_token
    assert other.get(names[0]).state == "free"
    assert other.get(names[2]).state == "free"  # never taken
    assert holder_token(other, names[1]) == held.fencing_token
    time.sleep(0.1)
    left = [t for t in threading.enumerate() if t.name.startswith("mutexd-renew %s" % names[0])]
    assert left == []


def test_lock_ordered_is_lost_when_any_lease_is(client, other, names):
    fired = []
    with client.lock_ordered(names, ttl=TTL) as leases:
        leases.on_lost(lambda: fired.append(True))
        time.sleep(0.2)
        assert other.break_lease(names[1]) is True
        assert leases.lost.wait(TTL / 3 + 0.7)
        assert isinstance(leases.error, mutexd.LeaseLost)
        assert leases[names[1]].lost.is_set() and not leases[names[0]].lost.is_set()
        with pytest.raises(mutexd.LeaseLost):
            leases.check()
        assert leases.expires_in == 0
    assert fired == [True]
    assert all(other.get(n).state == "free" for n in names)


def test_lock_ordered_sees_a_deadline_passed_with_no_thread_run(client, names):
    # The group's lost asks each lease's clock: a lease past its deadline is lost at the
    # group's next check, as in a process resumed after a pause before its threads ran.
    first = client.acquire(names[0], ttl=1.0)
    second = client.acquire(names[1], ttl=5.0)
    group = mutexd.OrderedLeases([mutexd.HeldLease(client, first),
                                  mutexd.HeldLease(client, second)])
    assert not group.lost.is_set()
    time.sleep(group.deadline - time.monotonic() + 0.01)
    assert group.lost.is_set()
    with pytest.raises(mutexd.LeaseExpired):
        group.check()
    client.release(first)
    client.release(second)


def test_lock_ordered_checks_its_names(client, names):
    with pytest.raises(ValueError):
        client.lock_ordered([names[0], names[0]])
    with pytest.raises(TypeError):
        client.lock_ordered(names[0])
