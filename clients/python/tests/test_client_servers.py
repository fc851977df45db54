"""Several server URLs: a dead one is passed over and the live one kept, a 503 moves the
client on (after its Retry-After before going round again), an acquire whose answer was
lost gets its own lease back from the next server, and no renewal attempt outlives the
lease's deadline. Real servers, with small stand-ins on loopback for what a real one does
not do (answer 503 at will, lose an answer, never answer)."""

from __future__ import annotations

import http.client
import json
import socket
import threading
import time
import urllib.parse
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

import mutexd


def dead_url():
    """A loopback URL where nothing listens."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return "http://127.0.0.1:%d" % s.getsockname()[1]


class StandIn:
    """An HTTP server on loopback; ``answer(handler, body)`` answers each request (or not).
    ``hits`` counts the requests."""

    def __init__(self, answer):
        self.hits = 0
        stand_in = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _any(self):
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                stand_in.hits += 1
                answer(self, body)

            do_GET = do_POST = _any

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = "http://127.0.0.1:%d" % self.httpd.server_address[1]
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


def unavailable(handler, body):
    raw = json.dumps({"error": {"code": "unavailable", "message": "no active server",
                                "reason": "no_active_server"}}).encode()
    handler.send_response(503)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Retry-After", "1")
    handler.send_header("Content-Length", str(len(raw)))
    handler.end_headers()
    handler.wfile.write(raw)


class Silent:
    """Accepts connections and never answers; records when each was accepted and when the
    client closed it (``time.monotonic()``)."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.url = "http://127.0.0.1:%d" % self.sock.getsockname()[1]
        self.accepted = []
        self.closed = []
        self._stop = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while not self._stop:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.accepted.append(time.monotonic())
            threading.Thread(target=self._hold, args=(conn,), daemon=True).start()

    def _hold(self, conn):
        with conn:
            try:
                while conn.recv(65536):
                    pass
            except OSError:
                pass
        self.closed.append(time.monotonic())

    def close(self):
        self._stop = True
        self.sock.close()


def test_urls_in_a_list_a_string_and_the_environment(server, monkeypatch):
    dead = dead_url()
    for c in (mutexd.Client([dead, server.url]), mutexd.Client("%s, %s" % (dead, server.url))):
        with c:
            assert c.urls == (dead, server.url)
            assert c.url == dead
            assert c.get("tests/urls").state == "free"
            assert c.url == server.url
    monkeypatch.setenv("MUTEXD_URL", "%s,%s" % (dead, server.url))
    with mutexd.Client() as c:
        assert c.urls == (dead, server.url)
        assert c.get("tests/urls").state == "free"
    monkeypatch.delenv("MUTEXD_URL")
    assert mutexd.Client().urls == ("http://127.0.0.1:8080",)
    with pytest.raises(ValueError):
        mutexd.Client(" , ")


def test_a_dead_server_is_passed_over_and_the_live_one_kept(server, name):
    stand_in = StandIn(unavailable)  # counts what reaches the first URL
    try:
        with mutexd.Client([stand_in.url, dead_url(), server.url], timeout=5) as c:
            lease = c.acquire(name, ttl=5)
            assert c.url == server.url
            assert stand_in.hits == 1
            for _ in range(3):
                c.renew(lease)
            assert c.get(name).holder.fencing_token == lease.fencing_token
            c.release(lease)
            assert stand_in.hits == 1, "the server that answered is asked first"
            assert c.url == server.url
    finally:
        stand_in.close()


def test_an_error_answer_is_not_passed_over(server, name):
    stand_in = StandIn(unavailable)
    try:
        with mutexd.Client([server.url, stand_in.url]) as c, mutexd.Client(server.url) as o:
            held = o.acquire(name)
            with pytest.raises(mutexd.LeaseHeld):
                c.acquire(name)
            assert stand_in.hits == 0
            o.release(held)
    finally:
        stand_in.close()


def not_found_naming(served_by):
    """Answers 404 not_found, naming ``served_by`` as the active that served it."""
    def answer(handler, body):
        raw = json.dumps({"error": {"code": "not_found", "message": "no such lease"}}).encode()
        handler.send_response(404)
        handler.send_header("Content-Type", "application/json")
        if served_by:
            handler.send_header("Mutexd-Served-By", served_by)
        handler.send_header("Content-Length", str(len(raw)))
        handler.end_headers()
        handler.wfile.write(raw)
    return answer


def test_the_active_named_by_a_standby_is_asked_first():
    active = StandIn(not_found_naming(None))
    # Another spelling of the active's URL: scheme and host in capitals, a trailing slash.
    standby = StandIn(not_found_naming(active.url.upper() + "/"))
    stranger = StandIn(not_found_naming("http://127.0.0.1:1"))
    try:
        with mutexd.Client([standby.url, active.url]) as c:
            for _ in range(3):
                with pytest.raises(mutexd.NotFound):
                    c.release("a", "5f1c6c1e-4d1b-4a52-9b8e-0d2f6f1a7e3c")
            assert (standby.hits, active.hits) == (1, 2)
            assert c.url == active.url
        # A URL the client was not given is never used.
        with mutexd.Client([stranger.url, active.url]) as c:
            for _ in range(3):
                with pytest.raises(mutexd.NotFound):
                    c.release("a", "5f1c6c1e-4d1b-4a52-9b8e-0d2f6f1a7e3c")
            assert stranger.hits == 3
    finally:
        for s in (active, standby, stranger):
            s.close()


def test_when_every_server_fails_the_last_error_is_raised():
    a, b = dead_url(), dead_url()
    with mutexd.Client([a, b]) as c:
        with pytest.raises(mutexd.TransportError) as info:
            c.get("x")
        assert info.value.url.startswith(b)
        assert c.url == a
    stand_in = StandIn(unavailable)
    try:
        with mutexd.Client([a, stand_in.url], timeout=0.5) as c:
            with pytest.raises(mutexd.Unavailable):
                c.get("x")
            assert stand_in.hits == 1  # a pause of 1 s would not end within the timeout
    finally:
        stand_in.close()


def test_503_answers_are_tried_again_after_their_retry_after(server, name):
    stand_ins = [StandIn(unavailable), StandIn(unavailable)]
    try:
        with mutexd.Client([s.url for s in stand_ins], timeout=1.5) as c:
            start = time.monotonic()
            with pytest.raises(mutexd.Unavailable) as info:
                c.get(name)
            took = time.monotonic() - start
            assert info.value.reason == "no_active_server"
            # Two rounds, 1 s apart (Retry-After: 1); a third would end past the timeout.
            assert [s.hits for s in stand_ins] == [2, 2]
            assert 1.0 <= took < 1.5
    finally:
        for s in stand_ins:
            s.close()


def test_an_acquire_whose_answer_was_lost_gets_its_lease_from_the_next_server(server, name):
    granted = []
    target = urllib.parse.urlsplit(server.url)

    def forward_and_drop(handler, body):
        # The request reaches the real server, which grants it; the answer never comes back.
        conn = http.client.HTTPConnection(target.hostname, target.port, timeout=5)
        conn.request(handler.command, handler.path, body=body,
                     headers={"Content-Type": "application/json"})
        granted.append(json.loads(conn.getresponse().read()))
        conn.close()
        handler.close_connection = True
        handler.connection.shutdown(socket.SHUT_RDWR)

    lossy = StandIn(forward_and_drop)
    try:
        with mutexd.Client([lossy.url, server.url], timeout=5) as c:
            lease = c.acquire(name, ttl=5)
            assert lossy.hits == 1 and len(granted) == 1
            assert granted[0]["lease_id"] == lease.lease_id
            assert granted[0]["fencing_token"] == lease.fencing_token
            assert c.url == server.url
            with pytest.raises(mutexd.LeaseHeld) as info:
                c.acquire(name)  # another proposed lease id: held, by the first one
            assert info.value.holder.fencing_token == lease.fencing_token
            c.release(lease)
    finally:
        lossy.close()


def test_the_same_proposed_lease_id_twice_is_the_same_lease(client, name):
    lease_id = str(uuid.uuid4())
    first = client.acquire(name, ttl=5, lease_id=lease_id)
    again = client.acquire(name, ttl=5, lease_id=lease_id)
    assert (again.lease_id, again.fencing_token) == (lease_id, first.fencing_token)
    client.release(again)


def test_no_renewal_attempt_outlives_the_deadline():
    silent = [Silent(), Silent()]
    try:
        with mutexd.Client([s.url for s in silent], timeout=10) as c:
            deadline = time.monotonic() + 0.6
            with pytest.raises(mutexd.Timeout):
                c.renew("r", str(uuid.uuid4()), deadline=deadline)
            assert time.monotonic() < deadline + 0.3
            time.sleep(0.2)
            accepted = [t for s in silent for t in s.accepted]
            closed = [t for s in silent for t in s.closed]
            assert accepted and all(t < deadline for t in accepted)
            assert len(closed) == len(accepted) and all(t < deadline + 0.15 for t in closed)
    finally:
        for s in silent:
            s.close()


def test_a_held_lease_is_lost_at_its_deadline_whatever_the_servers(client, name):
    # Each attempt may take a third of the TTL: the first renewal, a third of the TTL in,
    # could last past the deadline on the third server if the call were not bounded by it.
    silent = [Silent(), Silent(), Silent()]
    try:
        lease = client.acquire(name, ttl=1.5)
        with mutexd.Client([s.url for s in silent], timeout=10) as c:
            held = mutexd.HeldLease(c, lease).start()
            deadline = held.deadline
            assert held.lost.wait(5)
            assert isinstance(held.error, mutexd.LeaseExpired)
            assert time.monotonic() < deadline + 0.3
            held.stop()
            time.sleep(0.2)
            accepted = [t for s in silent for t in s.accepted]
            closed = [t for s in silent for t in s.closed]
            assert accepted, "renewals were tried"
            assert all(t < deadline for t in accepted)
            assert len(closed) == len(accepted) and all(t < deadline + 0.1 for t in closed)
        client.release(lease)
    finally:
        for s in silent:
            s.close()
