"""Answers the real server does not give today (it has no authorization yet) or should
never give: checked against a small scripted HTTP server on loopback."""

from __future__ import annotations

import json
import os
import pickle
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

import mutexd
from mutexd_testserver import ROOT


class Stub:
    """Answers every request with the next scripted (status, headers, body)."""

    def __init__(self):
        self.script = []
        self.requests = []
        self.delay = 0.0
        stub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _answer(self):
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                stub.requests.append((self.command, self.path, dict(self.headers), body,
                                      self.client_address))
                if stub.delay:
                    time.sleep(stub.delay)
                status, headers, payload = stub.script.pop(0) if stub.script else (200, {}, {})
                raw = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            do_GET = do_POST = _answer

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = "http://127.0.0.1:%d" % self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def stub():
    s = Stub()
    yield s
    s.close()


def _error(code, message="m", **extra):
    return {"error": dict(code=code, message=message, **extra)}


LEASE = {"resource": "r", "lease_id": "3f2c8a4e-9b1d-4c6e-8f7a-2d5b1e0c9a47", "owner": "o",
         "fencing_token": 18446744073709551615, "ttl_ms": 15000, "expires_in_ms": 15000,
         "acquired_at": "2026-01-15T09:30:00.000Z", "renewed_at": None, "metadata": None}


def test_token_is_sent_and_401_403_are_mapped(stub):
    stub.script = [
        (401, {"X-Request-Id": "r1"}, _error("unauthorized", "missing bearer token")),
        (403, {}, _error("forbidden", "this token lacks the admin scope")),
    ]
    with mutexd.Client(stub.url + "/base", token="s3cret") as c:
        with pytest.raises(mutexd.Unauthorized) as info:
            c.acquire("jobs/x", owner="me")
        err = info.value
        assert (err.status, err.code, err.request_id) == (401, "unauthorized", "r1")
        assert info.value.message == "missing bearer token"
        with pytest.raises(mutexd.Forbidden) as info2:
            c.break_lease("jobs/x")
        assert (info2.value.status, info2.value.code) == (403, "forbidden")
    method, path, headers, body, _ = stub.requests[0]
    assert (method, path) == ("POST", "/base/v1/resources/jobs/x/acquire")
    assert headers["Authorization"] == "Bearer s3cret"
    assert headers["Content-Type"] == "application/json"
    sent = json.loads(body)
    assert sent["owner"] == "me" and "ttl_ms" not in sent and "wait_ms" not in sent
    assert len(sent["lease_id"]) == 36  # always proposed, for safe retries
    assert json.loads(stub.requests[1][3]) == {}


def test_the_version_and_the_user_agent(stub):
    # Imported from the checkout, the version is pyproject.toml's, which is VERSION's
    # (scripts/check-version.sh); installed, the distribution's (test_install.py).
    with open(os.path.join(ROOT, "VERSION")) as f:
        assert mutexd.__version__ == f.readline().strip()
    with mutexd.Client(stub.url) as c:
        c.break_lease("r")
    assert stub.requests[0][2]["User-Agent"] == "mutexd-python/" + mutexd.__version__


def test_unknown_answers(stub):
    stub.script = [
        (502, {}, b"<html>bad gateway</html>"),
        (500, {}, _error("internal", "oops")),
        (418, {}, _error("teapot")),
        (200, {}, b"not json"),
        (200, {}, [1]),
        (200, {}, {"resource": "r"}),
        (409, {}, {"error": {"code": "something_new", "message": "x"}}),
    ]
    with mutexd.Client(stub.url) as c:
        with pytest.raises(mutexd.ServerError) as info:
            c.get("r")
        assert info.value.status == 502 and info.value.code is None
        assert "bad gateway" in info.value.message
        with pytest.raises(mutexd.ServerError) as info:
            c.get("r")
        assert info.value.code == "internal"
        with pytest.raises(mutexd.APIError) as info:
            c.get("r")
        assert type(info.value) is mutexd.APIError and info.value.code == "teapot"
        for _ in range(3):
            with pytest.raises(mutexd.ProtocolError) as info:
                c.get("r")
            assert isinstance(info.value, mutexd.TransportError)
        with pytest.raises(mutexd.Conflict) as info:
            c.get("r")
        assert info.value.code == "something_new"


def test_large_fencing_tokens_stay_exact(stub):
    stub.script = [(200, {}, LEASE)]
    with mutexd.Client(stub.url) as c:
        lease = c.acquire("r")
    assert lease.fencing_token == 2 ** 64 - 1
    assert lease.renewed_at is None


def test_timeout_is_a_transport_error(stub):
    stub.delay = 1.0
    with mutexd.Client(stub.url, timeout=0.2) as c:
        start = time.monotonic()
        with pytest.raises(mutexd.Timeout) as info:
            c.get("r")
        assert time.monotonic() - start < 0.9
        assert "0.2" in str(info.value)
        assert isinstance(info.value, mutexd.TransportError)
        assert mutexd.is_retryable(info.value)


def test_waits_extend_the_timeout(stub):
    stub.delay = 0.5
    stub.script = [(200, {}, LEASE), (200, {}, {"resource": "r", "state": "free", "index": 3,
                                                "holder": None, "waiters": 0})]
    with mutexd.Client(stub.url, timeout=0.3) as c:
        c.acquire("r", wait=1)  # the answer takes longer than timeout, but within wait
        assert c.watch("r", 2, wait=1).index == 3
    assert json.loads(stub.requests[0][3])["wait_ms"] == 1000
    assert stub.requests[1][1] == "/v1/resources/r?index=2&wait_ms=1000"


def test_names_and_queries_are_encoded(stub):
    stub.script = [(200, {}, {"resources": [], "next_cursor": None})] * 2
    with mutexd.Client(stub.url) as c:
        list(c.list(prefix="jobs/a b", limit=5))
        c.list_page(cursor="x&y")
        stub.script = [(400, {}, _error("invalid_resource"))]
        with pytest.raises(mutexd.InvalidRequest):
            c.get("a?b#c")
        stub.script = [(200, {}, {})]
        c.release("{order-7}/lock", LEASE["lease_id"])
    assert stub.requests[0][1] == "/v1/resources?prefix=jobs/a+b&limit=5"
    assert stub.requests[1][1] == "/v1/resources?cursor=x%26y"
    assert stub.requests[2][1] == "/v1/resources/a%3Fb%23c"
    # A hash tag's braces, which the contract has sent percent-encoded.
    assert stub.requests[3][1] == "/v1/resources/%7Border-7%7D/lock/release"


# -- semaphores and shared leases: what is sent, and how the answers are read ----------


HOLDER = {"owner": "o1", "fencing_token": 7, "shared": True, "ttl_ms": 5000,
          "expires_in_ms": 4000, "acquired_at": "2026-01-15T09:30:00.000Z",
          "renewed_at": None, "metadata": {"n": 1}}


def test_limit_and_shared_are_sent_only_when_given(stub):
    stub.script = [(200, {}, LEASE)] * 3 + [(200, {}, dict(LEASE, limit=3)), (200, {}, {})]
    with mutexd.Client(stub.url) as c:
        c.acquire("r")
        c.acquire("r", limit=3)
        c.acquire("r", shared=True, limit=1)
        with c.lock("r", limit=3) as held:
            assert (held.limit, held.shared) == (3, False)
    bodies = [json.loads(r[3]) for r in stub.requests]
    # Without them the request is the one a server without semaphores takes.
    assert "limit" not in bodies[0] and "shared" not in bodies[0]
    assert bodies[1]["limit"] == 3 and "shared" not in bodies[1]
    assert bodies[2]["shared"] is True and bodies[2]["limit"] == 1
    assert bodies[3]["limit"] == 3 and "shared" not in bodies[3]
    assert stub.requests[4][1] == "/v1/resources/r/release"


def test_limit_and_shared_of_the_wrong_type_are_refused_before_sending(stub):
    with mutexd.Client(stub.url) as c:
        for kw in ({"limit": "3"}, {"limit": True}, {"limit": 2.0}, {"shared": "yes"},
                   {"shared": 1}):
            with pytest.raises(TypeError):
                c.acquire("r", **kw)
    assert stub.requests == []


def test_a_lease_reads_limit_and_shared(stub):
    stub.script = [(200, {}, dict(LEASE, limit=1, shared=True)), (200, {}, dict(LEASE, limit=4)),
                   (200, {}, LEASE), (200, {}, dict(LEASE, shared="yes"))]
    with mutexd.Client(stub.url) as c:
        reader = c.acquire("r", shared=True)
        assert (reader.limit, reader.shared) == (1, True)
        renewed = c.renew(reader)
        assert (renewed.limit, renewed.shared) == (4, False)
        # A server without semaphores sends neither: its leases are exclusive, limit 1.
        old = c.acquire("r")
        assert (old.limit, old.shared) == (1, False)
        with pytest.raises(mutexd.ProtocolError):
            c.acquire("r")


def test_a_state_reads_limit_and_every_holder(stub):
    second = dict(HOLDER, owner="o2", fencing_token=2 ** 64 - 2, shared=False, metadata=None)
    state = {"resource": "r", "state": "held", "index": 9, "limit": 3,
             "holder": HOLDER, "holders": [HOLDER, second], "waiters": 1}
    stub.script = [(200, {}, state), (200, {}, {"resources": [state], "next_cursor": None})]
    with mutexd.Client(stub.url) as c:
        got = c.get("r")
        page = c.list_page()
    assert page.resources == [got]
    assert got.limit == 3 and got.held and got.waiters == 1
    assert [h.owner for h in got.holders] == ["o1", "o2"]
    assert all(isinstance(h, mutexd.Holder) for h in got.holders)
    assert [h.shared for h in got.holders] == [True, False]
    assert got.holders[1].fencing_token == 2 ** 64 - 2
    assert got.holders[0].metadata == {"n": 1} and got.holders[0].expires_in == 4
    assert got.holder == got.holders[0]


def test_a_state_from_a_server_without_semaphores(stub):
    old_holder = {k: v for k, v in HOLDER.items() if k != "shared"}
    stub.script = [
        (200, {}, {"resource": "r", "state": "held", "index": 3, "holder": old_holder,
                   "waiters": 0}),
        (200, {}, {"resource": "r", "state": "free", "index": 4, "holder": None, "waiters": 0}),
    ]
    with mutexd.Client(stub.url) as c:
        held = c.get("r")
        free = c.get("r")
    assert held.limit == 1 and held.holders == [held.holder] and not held.holders[0].shared
    assert free == mutexd.ResourceState("r", "free", 4, None, 0, 1, [])


def test_malformed_holders_are_a_protocol_error(stub):
    malformed = [{"owner": "o"}, [1], ["x"], [dict(HOLDER, shared="no")]]
    stub.script = [(200, {}, {"resource": "r", "state": "held", "index": 3, "limit": 1,
                              "holder": None, "holders": h, "waiters": 0}) for h in malformed]
    with mutexd.Client(stub.url) as c:
        for _ in malformed:
            with pytest.raises(mutexd.ProtocolError):
                c.get("r")


def test_limit_mismatch_carries_the_limit_in_force(stub):
    stub.script = [(409, {"X-Request-Id": "q"}, _error("limit_mismatch", "held under 3", limit=3)),
                   (409, {}, _error("limit_mismatch"))]
    with mutexd.Client(stub.url) as c:
        with pytest.raises(mutexd.LimitMismatch) as info:
            c.acquire("r", limit=2)
        with pytest.raises(mutexd.LimitMismatch) as info2:
            c.acquire("r")
    err = info.value
    assert isinstance(err, mutexd.Conflict) and not isinstance(err, mutexd.LeaseHeld)
    assert (err.status, err.code, err.limit, err.request_id) == (409, "limit_mismatch", 3, "q")
    assert not mutexd.is_retryable(err)
    copy = pickle.loads(pickle.dumps(err))
    assert type(copy) is mutexd.LimitMismatch and copy.limit == 3
    assert info2.value.limit is None  # the server did not say


def test_break_sends_the_lease_id_only_when_given(stub):
    stub.script = [(200, {}, {"resource": "r", "broken": True}),
                   (200, {}, {"resource": "r", "broken": False})]
    lease_id = "3f2c8a4e-9b1d-4c6e-8f7a-2d5b1e0c9a47"
    with mutexd.Client(stub.url) as c:
        assert c.break_lease("r", lease_id=lease_id) is True
        assert c.break_lease("r", "stuck") is False
    assert json.loads(stub.requests[0][3]) == {"lease_id": lease_id}
    assert json.loads(stub.requests[1][3]) == {"reason": "stuck"}
