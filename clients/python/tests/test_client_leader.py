"""run_when_leader(): one leader at a time, hand-over, loss, and stopping the loop."""

from __future__ import annotations

import threading
import time

import pytest

import mutexd

TTL = 1.5


class Worker:
    """One candidate: runs run_when_leader in a thread and records its terms."""

    def __init__(self, url, resource, tag, shared, retry=0.2):
        self.client = mutexd.Client(url, timeout=2)
        self.resource = resource
        self.tag = tag
        self.shared = shared  # {"lock", "leaders", "log"}
        self.stop = threading.Event()
        self.leading = threading.Event()
        self.terms = []
        self.standby = []
        self.error = None
        self.thread = threading.Thread(target=self._run, args=(retry,))

    def _run(self, retry):
        try:
            self.client.run_when_leader(
                self.resource, self.work, ttl=TTL, retry_interval=retry, owner=self.tag,
                stop=self.stop, on_standby=lambda e, s: self.standby.append((e, s)),
            )
        except BaseException as exc:
            self.error = exc
        finally:
            self.client.close()

    def work(self, stop_event):
        with self.shared["lock"]:
            self.shared["leaders"].add(self.tag)
            self.shared["max"] = max(self.shared["max"], len(self.shared["leaders"]))
            self.shared["log"].append((self.tag, stop_event.fencing_token))
        self.terms.append(stop_event)
        self.leading.set()
        try:
            stop_event.wait()  # the leader's job, until told to stop
        finally:
            self.leading.clear()
            with self.shared["lock"]:
                self.shared["leaders"].discard(self.tag)

    def start(self):
        self.thread.start()
        return self

    def finish(self):
        self.stop.set()
        self.thread.join(10)
        assert not self.thread.is_alive()
        assert self.error is None, self.error


def _shared():
    return {"lock": threading.Lock(), "leaders": set(), "log": [], "max": 0}


def test_hand_over_between_two_callers(server, other, name):
    shared = _shared()
    a = Worker(server.url, name, "a", shared).start()
    assert a.leading.wait(5)
    b = Worker(server.url, name, "b", shared).start()
    time.sleep(0.8)  # b tries a few times, a keeps the lease by renewing
    assert not b.leading.is_set()
    assert b.standby and isinstance(b.standby[0][0], mutexd.LeaseHeld)
    assert b.standby[0][1] == pytest.approx(0.2)
    assert other.get(name).holder.owner == "a"

    stopped_at = time.monotonic()
    a.stop.set()  # a releases; b takes over on its next try
    assert b.leading.wait(3)
    assert time.monotonic() - stopped_at < 1.5
    a.finish()
    assert a.terms[0].is_set()  # a's function was told to stop
    assert other.get(name).holder.owner == "b"
    b.finish()
    assert other.get(name).state == "free"  # released when the loop ended
    assert shared["max"] == 1  # never two leaders at once
    (ta, tb) = [t for _, t in shared["log"]]
    assert [w for w, _ in shared["log"]] == ["a", "b"] and tb > ta


def test_loss_sets_stop_event_at_once_and_the_loop_tries_again(server, other, name):
    shared = _shared()
    w = Worker(server.url, name, "w", shared).start()
    try:
        assert w.leading.wait(5)
        first = w.terms[0]
        assert other.break_lease(name) is True
        broken_at = time.monotonic()
        assert first.wait(TTL / 3 + 0.7)  # set by the renewal answered lease_lost
        assert time.monotonic() - broken_at < TTL / 3 + 0.7
        assert first.lease.lost.is_set()
        assert isinstance(first.lease.error, mutexd.LeaseLost)
        # The loop went back to acquiring: the resource was free, so w leads again.
        deadline = time.monotonic() + 5
        while len(w.terms) < 2:
            assert time.monotonic() < deadline
            time.sleep(0.02)
        assert w.terms[1].fencing_token > first.fencing_token
    finally:
        w.finish()


def test_loss_when_the_server_dies(start_server, name):
    server = start_server()
    shared = _shared()
    w = Worker(server.url, name, "w", shared, retry=0.3).start()
    try:
        assert w.leading.wait(5)
        term = w.terms[0]
        time.sleep(0.6)
        server.kill()
        killed_at = time.monotonic()
        assert term.wait(TTL + 0.5)
        assert TTL / 3 <= time.monotonic() - killed_at <= TTL + 0.6
        assert isinstance(term.lease.error, mutexd.LeaseExpired)
        time.sleep(0.5)
        assert any(isinstance(e, mutexd.TransportError) for e, _ in w.standby)
    finally:
        w.finish()


def test_function_returning_releases_and_runs_again(server, other, name):
    calls = []
    stop = threading.Event()

    def fn(stop_event):
        calls.append((time.monotonic(), stop_event.fencing_token))
        if len(calls) == 2:
            stop.set()

    c = mutexd.Client(server.url)
    try:
        c.run_when_leader(name, fn, ttl=TTL, retry_interval=0.3, stop=stop)
    finally:
        c.close()
    assert len(calls) == 2
    assert calls[1][0] - calls[0][0] >= 0.25  # waited retry_interval in between
    assert calls[1][1] > calls[0][1]
    assert other.get(name).state == "free"


def test_function_raising_is_raised_after_release(server, other, name):
    def fn(stop_event):
        raise ValueError("leader task failed")

    with mutexd.Client(server.url) as c:
        with pytest.raises(ValueError, match="leader task failed"):
            c.run_when_leader(name, fn, ttl=TTL)
    assert other.get(name).state == "free"


def test_configuration_errors_are_raised(server):
    with mutexd.Client(server.url) as c:
        with pytest.raises(mutexd.InvalidRequest) as info:
            c.run_when_leader("bad//name", lambda e: None)
        assert info.value.code == "invalid_resource"
        with pytest.raises(mutexd.InvalidRequest) as info:
            c.run_when_leader("good", lambda e: None, ttl=0.1)
        assert info.value.code == "invalid_ttl"


def test_stop_before_start_returns_at_once(server, name):
    stop = threading.Event()
    stop.set()
    with mutexd.Client(server.url) as c:
        c.run_when_leader(name, lambda e: pytest.fail("must not run"), stop=stop)
