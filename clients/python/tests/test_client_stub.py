"""Answers the real server does not give today (it has no authorization yet) or should
never give: checked against a small scripted HTTP server on loopback."""

from __future__ import annotations

import json
import os
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
    assert stub.requests[0][1] == "/v1/resources?prefix=jobs/a+b&limit=5"
    assert stub.requests[1][1] == "/v1/resources?cursor=x%26y"
    assert stub.requests[2][1] == "/v1/resources/a%3Fb%23c"
