"""client.lock(): acquire, renew in the background, detect loss, release."""

from __future__ import annotations

import logging
import threading
import time

import pytest

import mutexd

TTL = 1.5  # the renewer sends a renewal every 0.5 s


def test_lock_renews_and_the_lease_survives_several_ttls(client, other, name):
    with client.lock(name, ttl=TTL, wait=1, metadata={"address": "host-a:9000"}) as lease:
        assert isinstance(lease, mutexd.HeldLease)
        token = lease.fencing_token
        assert lease.resource == name and lease.ttl == TTL
        assert lease.metadata == {"address": "host-a:9000"}
        start = time.monotonic()
        while time.monotonic() - start < 4 * TTL:
            time.sleep(0.25)
            assert not lease.lost.is_set()
            assert 0 < lease.expires_in <= TTL
            state = other.get(name)
            assert state.held and state.holder.fencing_token == token
        assert lease.renewals >= 8  # about one every 0.5 s
        assert lease.fencing_token == token
        assert lease.renewed_at is not None
        with pytest.raises(mutexd.LeaseHeld):
            other.acquire(name)
        lease.check()  # does not raise
    # Released on exit.
    assert other.get(name).state == "free"
    assert lease.lost.is_set() is False


def test_lock_waits_for_the_holder(client, other, name):
    order = []
    entered = threading.Event()

    def first():
        with client.lock(name, ttl=TTL) as lease:
            order.append(("first", lease.fencing_token))
            entered.set()
            time.sleep(0.6)

    t = threading.Thread(target=first)
    t.start()
    entered.wait(5)
    start = time.monotonic()
    with other.lock(name, ttl=TTL, wait=10) as lease:
        order.append(("second", lease.fencing_token))
        assert 0.2 < time.monotonic() - start < 3
    t.join()
    assert [o for o, _ in order] == ["first", "second"]
    assert order[1][1] > order[0][1]


def test_lock_wait_runs_out(client, other, name):
    holder = client.acquire(name, ttl=10)
    start = time.monotonic()
    with pytest.raises(mutexd.LeaseHeld) as info:
        with other.lock(name, ttl=TTL, wait=0.5):
            pytest.fail("the body must not run")
    assert 0.4 < time.monotonic() - start < 3
    assert info.value.holder.fencing_token == holder.fencing_token


def test_lost_is_set_at_once_when_the_lease_is_broken(client, other, name):
    with client.lock(name, ttl=TTL) as lease:
        time.sleep(0.2)
        assert other.break_lease(name, reason="test") is True
        broken_at = time.monotonic()
        # The next renewal (at most a third of the TTL away) is answered lease_lost.
        assert lease.lost.wait(TTL / 3 + 0.7)
        assert time.monotonic() - broken_at < TTL / 3 + 0.7
        assert isinstance(lease.error, mutexd.LeaseLost)
        with pytest.raises(mutexd.LeaseLost):
            lease.check()
        assert lease.expires_in == 0
        # Someone else takes the resource; leaving the block must not disturb it.
        theirs = other.acquire(name, ttl=5)
    state = other.get(name)
    assert state.held and state.holder.fencing_token == theirs.fencing_token


def test_lost_when_the_server_dies_and_the_ttl_passes(start_server, name):
    server = start_server()
    c = mutexd.Client(server.url, timeout=2)
    try:
        body_error = RuntimeError("the body's own error")
        with pytest.raises(RuntimeError) as info:
            with c.lock(name, ttl=TTL) as lease:
                time.sleep(0.7)  # at least one renewal
                assert lease.renewals >= 1
                deadline = lease.deadline
                server.kill()
                killed_at = time.monotonic()
                assert deadline - killed_at <= TTL
                # Renewals fail (connection refused) and are retried until the deadline,
                # measured from the last successful renewal on the monotonic clock.
                assert not lease.lost.wait(max(0.0, deadline - time.monotonic() - 0.15))
                assert lease.lost.wait(TTL)
                lost_at = time.monotonic()
                assert deadline - 0.01 <= lost_at < deadline + 0.5
                assert killed_at + TTL / 3 <= lost_at <= killed_at + TTL + 0.5
                assert isinstance(lease.error, mutexd.LeaseExpired)
                assert isinstance(lease.last_error, mutexd.TransportError)
                with pytest.raises(mutexd.LeaseExpired):
                    lease.check()
                raise body_error
        # The failed release on exit did not replace the body's exception.
        assert info.value is body_error
    finally:
        c.close()


def test_body_exception_propagates_and_the_lease_is_released(client, other, name):
    class Boom(Exception):
        pass

    with pytest.raises(Boom):
        with client.lock(name, ttl=TTL):
            raise Boom()
    assert other.get(name).state == "free"


def test_failed_release_is_logged_not_raised(start_server, name, caplog):
    server = start_server()
    c = mutexd.Client(server.url, timeout=2)
    try:
        with caplog.at_level(logging.WARNING, logger="mutexd"):
            with c.lock(name, ttl=5) as lease:
                server.kill()
        assert not lease.lost.is_set()
        assert any("releasing" in r.getMessage() for r in caplog.records)
    finally:
        c.close()


def test_on_lost_callback(client, other, name):
    fired = []
    with client.lock(name, ttl=TTL) as lease:
        lease.on_lost(lambda: fired.append(lease.lost.is_set()))
        other.break_lease(name)
        assert lease.lost.wait(2)
        time.sleep(0.05)
    assert fired == [True]


def test_no_thread_is_left_behind(client, name):
    before = set(threading.enumerate())
    with client.lock(name, ttl=TTL):
        time.sleep(0.1)
    time.sleep(0.1)
    left = [t for t in threading.enumerate() if t not in before and t.name.startswith("mutexd")]
    assert left == []


def test_a_lease_past_its_deadline_is_lost_at_the_next_check_with_no_thread_run(client, name):
    # A HeldLease not started has no thread: nothing but the clock can tell it is lost, as in
    # a process resumed after a pause before its threads ran.
    lease = client.acquire(name, ttl=1.0)
    held = mutexd.HeldLease(client, lease)
    assert not held.lost.is_set()
    held.check()
    assert held.deadline == pytest.approx(lease.deadline - 0.02)  # less the safety margin
    time.sleep(held.deadline - time.monotonic() + 0.01)
    assert held.lost.is_set()
    with pytest.raises(mutexd.LeaseExpired) as e:
        held.check()
    assert "did not run in time" in str(e.value)
    assert held.expires_in == 0
    client.release(lease)


def test_leader_stop_event_sees_the_deadline(client, name):
    lease = client.acquire(name, ttl=1.0)
    held = mutexd.HeldLease(client, lease)
    stop = mutexd.LeaderStop(held)
    held.on_lost(stop.set)
    assert not stop.is_set()
    time.sleep(held.deadline - time.monotonic() + 0.01)
    assert stop.is_set()
    assert stop.wait(0)
    client.release(lease)


def test_renewals_to_a_silent_server_are_cut_short_and_retried_afresh(client, name):
    # A listener that accepts and never answers: each renewal attempt may take at most a third
    # of the TTL, so several fail (with their real error) before the deadline.
    import socket

    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(16)
    try:
        lease = client.acquire(name, ttl=1.5)
        quiet = mutexd.Client("http://127.0.0.1:%d" % silent.getsockname()[1], timeout=10)
        held = mutexd.HeldLease(quiet, lease).start()
        assert held.lost.wait(3)
        assert isinstance(held.error, mutexd.LeaseExpired)
        assert "no answer within" in str(held.error), held.error
        held.stop()
        quiet.close()
        client.release(lease)
    finally:
        silent.close()
