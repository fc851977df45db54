"""Hostile input: malformed requests of every kind, and slow clients, while normal
requests keep being answered promptly."""

import json
import random
import re
import socket
import threading
import time

import pytest

from harness import Server, raw_request, status_of

# A probe starved by hostile clients waits until they are cut off (seconds) or forever; a
# shared 2-core machine pauses a process for a second now and then. Between the two:
NOT_STARVED_S = 2.0


def post(path, body, ctype=b"application/json", extra=b""):
    if isinstance(body, str):
        body = body.encode("utf-8", "surrogateescape")
    return (b"POST " + path + b" HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
            b"Content-Type: " + ctype + b"\r\nContent-Length: %d\r\n" % len(body) + extra +
            b"\r\n" + body)


def malformed(rng):
    """One malformed request, as raw bytes, and what it may get: an error status or a
    closed connection. Never a 2xx, never a 5xx."""
    ok_path = b"/v1/resources/h%d/acquire" % rng.randrange(100)
    kind = rng.randrange(16)
    if kind == 0:  # broken JSON
        s = '{"owner":"o","ttl_ms":5000}'
        cut = rng.randrange(1, len(s) - 1)
        body = s[:cut] + rng.choice(["", "}", "{", ",", "\"", "]"])
        try:  # a cut that closes the object again ({"owner":"o"}) is valid: break it
            json.loads(body)
            body += ","
        except ValueError:
            pass
        return post(ok_path, body)
    if kind == 1:  # wrong types and values out of range, per field
        bad = {
            "owner": [[], {}, True, 5, "", "a\u0001"],
            "ttl_ms": [[], {}, True, "x", -1, 1.5, 1e300, 10 ** 12, 0],
            "wait_ms": [[], {}, True, "x", -1, 2.5, 10 ** 12],
            "lease_id": [[], {}, True, 5, "x", "0" * 36],
            "metadata": [[], True, 5, "x"],
        }
        field = rng.choice(sorted(bad))
        return post(ok_path, json.dumps({"owner": "o", field: rng.choice(bad[field])}))
    if kind == 2:  # huge fields
        return post(ok_path, json.dumps({"owner": "o" * rng.randrange(300, 60000)}))
    if kind == 3:  # invalid UTF-8
        bad = rng.choice([b"\xff", b"\xc3\x28", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\xc0\xaf"])
        return post(ok_path, b'{"owner":"a' + bad + b'"}')
    if kind == 4:  # bad paths
        p = rng.choice([b"/v1/resources//acquire", b"/v1/resources/../etc/acquire",
                        b"/v1/resources/a%00b/acquire", b"/v1/resources/" + b"x" * 300 + b"/acquire",
                        b"/v1/resources/a/unknownaction", b"/%ff%fe", b"/v1/resources/a b/acquire",
                        b"*", b"/v1/resources/\xff/acquire"])
        return post(p, '{"owner":"o"}')
    if kind == 5:  # oversized body by Content-Length
        return (b"POST " + ok_path + b" HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json"
                b"\r\nContent-Length: %d\r\n\r\n{" % rng.randrange(65537, 10 ** 9))
    if kind == 6:  # truncated body: Content-Length larger than what is sent
        return (b"POST " + ok_path + b" HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json"
                b"\r\nContent-Length: 500\r\n\r\n{\"owner\":\"o\"")
    if kind == 7:  # bad chunked encoding
        return (b"POST " + ok_path + b" HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json"
                b"\r\nTransfer-Encoding: chunked\r\n\r\n" +
                rng.choice([b"zz\r\n{}\r\n0\r\n\r\n", b"5\r\n{}\r\n0\r\n\r\n",
                            b"ffffffffffffffffff\r\n{", b"-1\r\n\r\n"]))
    if kind == 8:  # garbage request lines
        return rng.choice([b"\x00\x01\x02\r\n\r\n", b"GET\r\n\r\n", b"GET / HTTP/9.9\r\n\r\n",
                           b"POST /v1/resources/a/acquire HTTP/1.1\r\n\r\n",  # no Host
                           b"G\xffT / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
                           bytes(rng.randrange(256) for _ in range(rng.randrange(1, 200)))])
    if kind == 9:  # bad headers
        return (b"POST " + ok_path + b" HTTP/1.1\r\nHost: 127.0.0.1\r\nBad Header\r\n"
                b"Content-Length: 2\r\n\r\n{}")
    if kind == 10:  # not JSON
        return post(ok_path, '{"owner":"o"}', ctype=rng.choice([b"text/plain", b"application/xml",
                                                                 b"multipart/form-data"]))
    if kind == 11:  # deeply nested metadata
        depth = rng.randrange(100, 5000)
        return post(ok_path, '{"owner":"o","metadata":' + "[" * depth + "]" * depth + "}")
    if kind == 12:  # bad lease ids
        return post(b"/v1/resources/x/renew",
                    json.dumps({"lease_id": rng.choice(["", "x" * 36, "1" * 100,
                                                        "0d3d9875-ffa5-4520-b3e4-367071dd8f0"])}))
    if kind == 13:  # unknown fields
        return post(ok_path, json.dumps({"owner": "o", "ttl": 5, "x" * 200: 1}))
    if kind == 14:  # bad query strings
        q = rng.choice([b"?index=-5", b"?index=1&wait_ms=abc", b"?wait_ms=99999999999999999999",
                        b"?%zz", b"?index=1&index=2&wait_ms=0&x=1"])
        return b"GET /v1/resources/q" + q + b" HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    # duplicate keys, NUL bytes, and numbers out of range
    return post(ok_path, rng.choice(['{"owner":"o","owner":"p"}', '{"owner":"a\\u0000b"}',
                                     '{"owner":"o","ttl_ms":1e400}',
                                     '{"owner":"o","wait_ms":18446744073709551616}']))


class Probe(threading.Thread):
    """Normal clients doing acquire and release all along, timing each request."""

    def __init__(self, server):
        super().__init__(daemon=True)
        self.server, self.stop, self.latencies, self.failures = server, False, [], []

    def run(self):
        c = self.server.client(timeout=10)
        k = 0
        while not self.stop:
            k += 1
            t0 = time.monotonic()
            try:
                a = c.acquire("probe/%d" % (k % 7), owner="probe", ttl_ms=5000)
                r = c.release("probe/%d" % (k % 7), a.json["lease_id"])
                if a.status != 200 or r.status != 200:
                    self.failures.append((a, r))
            except Exception as e:  # a probe that cannot connect is a failure
                self.failures.append(e)
            self.latencies.append(time.monotonic() - t0)
            time.sleep(0.01)
        c.close()


def test_thousand_malformed_requests_get_4xx_or_are_closed():
    """A thousand malformed requests from 16 connections at a time. Each gets a 4xx or its
    connection closed; requests that stop short (a truncated body, a request line that
    never ends) are closed by the idle timeout. Normal requests stay prompt throughout."""
    seed = random.randrange(1 << 30)
    print("seed", seed)
    rng = random.Random(seed)
    requests = [malformed(rng) for _ in range(1000)]
    with Server(args=["--idle-timeout-ms", "1000"]) as server:
        probe = Probe(server)
        probe.start()
        statuses, bad, lock = {}, [], threading.Lock()

        def send(batch):
            for data in batch:
                raw = raw_request(server.host, server.port, data, timeout=5, half_close=True)
                st = status_of(raw)
                # 505 is libmicrohttpd's own answer to an HTTP version it does not speak,
                # the one 5xx that is the client's fault by definition.
                version_refused = st == 505 and re.match(rb"\S+ \S+ HTTP/(?!1\.[01]\r)", data)
                with lock:
                    statuses[st] = statuses.get(st, 0) + 1
                    if not (st is None or 400 <= st < 500 or version_refused):
                        bad.append((st, data[:300], raw[:300]))

        threads = [threading.Thread(target=send, args=(requests[i::16],)) for i in range(16)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(300)
        probe.stop = True
        probe.join(10)
        print("statuses", statuses)
        assert not bad, bad[:3]
        assert sum(statuses.values()) == 1000
        assert not probe.failures, probe.failures[:3]
        assert len(probe.latencies) > 20
        assert max(probe.latencies) < NOT_STARVED_S, max(probe.latencies)
        # Most were refused by the API itself, with its JSON errors.
        assert statuses.get(400, 0) > 500


def test_slow_clients_are_closed_and_do_not_starve_others():
    """100 connections send their request one byte a second. They are cut off after the
    idle timeout, and normal requests are answered promptly all the while."""
    with Server(args=["--idle-timeout-ms", "3000"]) as s:
        probe = Probe(s)
        probe.start()
        socks = []
        for _ in range(100):
            sock = socket.create_connection((s.host, s.port))
            sock.settimeout(0.01)
            socks.append(sock)
        request = b"POST /v1/resources/slow/acquire HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        closed_at = {}
        t0 = time.monotonic()
        for k in range(10):  # ten seconds, one byte each second
            for i, sock in enumerate(socks):
                if i in closed_at:
                    continue
                try:
                    sock.send(request[k:k + 1])
                    if sock.recv(1024) == b"":
                        closed_at[i] = time.monotonic() - t0
                except socket.timeout:
                    pass
                except OSError:
                    closed_at[i] = time.monotonic() - t0
            time.sleep(1)
        probe.stop = True
        probe.join(10)
        for sock in socks:
            sock.close()
        assert len(closed_at) == 100, "%d of 100 slow connections still open" % (
            100 - len(closed_at))
        assert max(closed_at.values()) < 3 + 2.5
        assert not probe.failures, probe.failures[:3]
        assert max(probe.latencies) < NOT_STARVED_S, max(probe.latencies)


def test_clients_that_vanish_mid_request_leave_nothing_behind():
    """Clients that close right after sending: their requests are answered into the void,
    counted as done, and shutdown does not wait for them."""
    with Server() as s:
        body = b'{"owner":"gone","ttl_ms":5000}'
        for k in range(300):
            sk = socket.create_connection((s.host, s.port))
            sk.sendall(b"POST /v1/resources/vanish/%d/acquire HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                       b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                       % (k, len(body), body))
            sk.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
            sk.close()  # an RST, at once
        c = s.client()
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            m = c.request("GET", "/metrics").body
            if re.search(r"^mutexd_http_requests_waiting 0$", m, re.M):
                break
            time.sleep(0.1)
        assert re.search(r"^mutexd_http_requests_waiting 0$", m, re.M), m
        c.close()
        t0 = time.monotonic()
    assert time.monotonic() - t0 < 1.5  # stopped without waiting for phantom requests
    assert not any("still waiting" in line for line in s.lines)


def read_answer(sock, timeout=2.0):
    """Everything the server sends until it closes the connection or `timeout` passes;
    and whether it closed."""
    sock.settimeout(timeout)
    data, closed = b"", False
    try:
        while True:
            b = sock.recv(65536)
            if not b:
                closed = True
                break
            data += b
    except socket.timeout:
        pass
    except ConnectionResetError:
        closed = True
    return data, closed


def test_a_request_refused_at_its_headers_is_answered_without_its_body(tmp_path):
    """Headers announcing a 64 KiB body, and no body: a request already refused (401, 403,
    404, 405, 413, 415) is answered at once and the connection closed, rather than held
    until a body that may never come."""
    digest = __import__("hashlib").sha256(b"r-token").hexdigest()
    path = tmp_path / "tokens"
    path.write_text("reader sha256:%s read\n" % digest)
    cases = [
        (b"POST /v1/resources/a/acquire", b"", 401),
        (b"POST /v1/resources/a/acquire", b"Authorization: Bearer r-token\r\n", 403),
        (b"POST /v1/resources/a/frobnicate", b"", 404),
        (b"PUT /v1/resources/a", b"", 405),
        (b"POST /v1/resources/a//acquire", b"", 400),
    ]
    with Server(args=["--auth-tokens", str(path)]) as s:
        for line, extra, want in cases:
            sk = socket.create_connection((s.host, s.port), timeout=5)
            t0 = time.monotonic()
            sk.sendall(line + b" HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                       b"Content-Length: 65536\r\n" + extra + b"\r\n{")
            data, closed = read_answer(sk)
            took = time.monotonic() - t0
            sk.close()
            assert status_of(data) == want and closed and took < 1.5, (line, want, data[:200],
                                                                       closed, took)
            assert b"Connection: close" in data
        # Without a body, a refusal leaves a keep-alive connection open.
        sk = socket.create_connection((s.host, s.port), timeout=5)
        for _ in range(2):
            sk.sendall(b"GET /v1/resources/a HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            data = sk.recv(65536)
            assert status_of(data) == 401 and b"Connection: close" not in data, data
        sk.close()


def exchange(s, data, timeout=2.0):
    """Sends raw bytes on a new connection; returns what came back and whether the server
    closed the connection."""
    sk = socket.create_connection((s.host, s.port), timeout=5)
    sk.sendall(data)
    try:
        return read_answer(sk, timeout)
    finally:
        sk.close()


def error_field(raw):
    body = raw.split(b"\r\n\r\n", 1)[1] if b"\r\n\r\n" in raw else b""
    try:
        e = json.loads(body)["error"]
        return e["code"], e.get("field")
    except (ValueError, KeyError):
        return None, None


SMUGGLED = b"GET /v1/resources/smuggled HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"


AMBIGUOUS = [
    ("two different Content-Lengths",
     b"POST /v1/resources/cl/acquire HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
     b"Content-Length: 13\r\nContent-Length: 63\r\n\r\n{\"owner\":\"o\"}" + SMUGGLED, "Content-Length"),
    ("two equal Content-Lengths",
     b"POST /v1/resources/cl/acquire HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
     b"Content-Length: 13\r\nContent-Length: 13\r\n\r\n{\"owner\":\"o\"}", "Content-Length"),
    ("Content-Length and chunked",
     b"POST /v1/resources/te/break HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
     b"Content-Length: %d\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n%s"
     % (5 + len(SMUGGLED), SMUGGLED), "Transfer-Encoding"),
    ("chunked and Content-Length",
     b"POST /v1/resources/te/break HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
     b"Transfer-Encoding: chunked\r\nContent-Length: %d\r\n\r\n0\r\n\r\n%s"
     % (5 + len(SMUGGLED), SMUGGLED), "Transfer-Encoding"),
    ("gzip, chunked",
     b"POST /v1/resources/te/break HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
     b"Transfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n", "Transfer-Encoding"),
    ("xchunked",
     b"POST /v1/resources/te/break HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
     b"Transfer-Encoding: xchunked\r\n\r\n0\r\n\r\n", "Transfer-Encoding"),
    ("two Transfer-Encodings",
     b"POST /v1/resources/te/break HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
     b"Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
     "Transfer-Encoding"),
    ("chunked in HTTP/1.0",
     b"POST /v1/resources/te/break HTTP/1.0\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
     b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n" + SMUGGLED, "Transfer-Encoding"),
    ("HTTP/1.1 without Host", b"GET /v1/resources/nohost HTTP/1.1\r\n\r\n", "Host"),
    ("two Hosts", b"GET /v1/resources/h HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", "Host"),
    ("two Authorizations",
     b"GET /v1/resources/h HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer a\r\n"
     b"Authorization: Bearer b\r\n\r\n", "Authorization"),
]


@pytest.mark.parametrize("name,data,field", AMBIGUOUS, ids=[a[0] for a in AMBIGUOUS])
def test_ambiguous_framing_is_400_and_closes(server, name, data, field):
    """What a proxy in front could read differently (RFC 9112 3.2, 6.1, 6.3) is refused:
    one 400 naming the header, and the connection closed, so that nothing that follows
    runs as a request of its own."""
    raw, closed = exchange(server, data)
    assert status_of(raw) == 400, (name, raw[:300])
    assert error_field(raw) == ("invalid_field", field), (name, raw[:300])
    answers = re.findall(rb"(?m)^HTTP/1\.[01] \d{3} ", raw)
    assert len(answers) == 1 and closed, (name, raw[:600])


def test_framing_that_is_fine_still_works(server):
    ok = [
        b"POST /v1/resources/fine/break HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json"
        b"\r\nTransfer-Encoding: Chunked\r\nConnection: close\r\n\r\n2\r\n{}\r\n0\r\n\r\n",
        b"POST /v1/resources/fine/break HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json"
        b"\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}",
        b"GET /healthz HTTP/1.0\r\n\r\n",  # HTTP/1.0 needs no Host
    ]
    for data in ok:
        raw, _ = exchange(server, data)
        assert status_of(raw) == 200, (data, raw[:300])


@pytest.mark.parametrize("path", [b"/v1/resources/a%00b/acquire", b"/v1/resources/a%00b",
                                  b"/v1/resources/a%0Ab", b"/v1/resources/a%1f", b"/v1/resources/a%7F",
                                  b"/healthz%00"])
def test_a_control_character_in_the_path_is_invalid_resource(server, path):
    """Decoded, %00 cut the path short: `a%00b/acquire` was 404 "unknown action 'a'", and a
    GET of `a%00b` read `a`. Any control character in a path is 400 invalid_resource."""
    method = b"POST" if path.endswith(b"acquire") else b"GET"
    raw, _ = exchange(server, method + b" " + path + b" HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                      b"Content-Type: application/json\r\nContent-Length: 13\r\n\r\n"
                      b'{"owner":"o"}' if method == b"POST" else
                      method + b" " + path + b" HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    assert status_of(raw) == 400 and error_field(raw)[0] == "invalid_resource", raw[:300]


def secured(tmp_path, tokens):
    """A server with authorization; each token is its own name."""
    path = tmp_path / "tokens"
    path.write_text("".join("%s sha256:%s %s\n" % (name, __import__("hashlib").sha256(
        name.encode()).hexdigest(), scopes) for name, scopes in tokens.items()))
    return Server(args=["--auth-tokens", str(path)])


def get_with(s, headers, eol=b"\r\n"):
    raw, _ = exchange(s, eol.join([b"GET /v1/resources/a HTTP/1.1", b"Host: 127.0.0.1",
                                   b"Connection: close"] + headers) + eol + eol)
    return status_of(raw), error_field(raw)


@pytest.mark.parametrize("eol", [b"\r\n", b"\n"], ids=["CRLF", "LF"])
def test_a_nul_in_a_header_is_refused(tmp_path, eol):
    """libmicrohttpd ends a header value at a NUL, so `Bearer tok\\0junk` authenticated as
    `tok`. A NUL anywhere in a header value is 400; and a bearer token is the whole value:
    anything after it but blanks is no longer that token."""
    with secured(tmp_path, {"tok": "read,write"}) as s:
        check_nul_in_headers(s, eol)


def check_nul_in_headers(secured, eol):
    assert get_with(secured, [b"Authorization: Bearer tok"], eol)[0] == 200
    assert get_with(secured, [b"Authorization: Bearer  tok \t"], eol)[0] == 200
    for headers in ([b"Authorization: Bearer tok\0junk"],
                    [b"Authorization: Bearer tok\0junk", b"Accept: */*"],
                    [b"Accept: */*", b"Authorization: Bearer tok\0\0junk", b"X-A: b"],
                    [b"Authorization: Bearer tok\0"],
                    [b"Authorization: Bearer tok\0", b"X-A: b"]):
        if eol == b"\n" and headers[-1].endswith(b"\0") or (
                eol == b"\n" and headers[0].endswith(b"\0")):
            continue  # a lone NUL before a bare LF reads as a CR: it hides nothing
        assert get_with(secured, headers, eol) == (400, ("invalid_field", "Authorization")), headers
    assert get_with(secured, [b"Authorization: Bearer tok", b"X-Other: a\0b"], eol) == (
        400, ("invalid_field", "X-Other"))
    # A value folded onto a second line (obsolete) is refused as well.
    assert get_with(secured, [b"Authorization: Bearer", b" tok"], eol)[0] == 400
    for value in (b"Bearer tok junk", b"Bearer tok,x", b"Bearer tok;", b"Bearer \"tok\""):
        assert get_with(secured, [b"Authorization: " + value], eol)[0] == 401, value


def test_metrics_need_their_own_scope(tmp_path):
    """/metrics counts every resource and client: a token limited to a prefix no longer
    reads it unless it has the `metrics` scope; a read token for everything still does (a
    tokens file from before keeps working), and a `metrics` token reads nothing else."""
    with secured(tmp_path, {"tok": "read,write", "jobs": "read,write jobs/"}) as s:
        c = s.client()
        # Before the scope existed too: a prefix-limited read token sees only its prefix.
        assert c.request("GET", "/metrics", headers={"Authorization": "Bearer jobs"}).status == 403
        assert c.request("GET", "/metrics", headers={"Authorization": "Bearer tok"}).status == 200
        c.close()
    with secured(tmp_path, {"tok": "read,write", "jobs": "read,write jobs/",
                            "jobsm": "read,metrics jobs/", "scraper": "metrics"}) as s:
        check_metrics_scope(s)


def check_metrics_scope(secured):
    c = secured.client()

    def metrics(token):
        return c.request("GET", "/metrics", headers={"Authorization": "Bearer " + token}).status

    assert metrics("jobs") == 403
    assert metrics("tok") == 200
    assert metrics("jobsm") == 200
    assert metrics("scraper") == 200
    r = c.request("GET", "/v1/resources/jobs/a", headers={"Authorization": "Bearer scraper"})
    assert r.status == 403 and "read" in r.json["error"]["message"]
    r = c.request("GET", "/metrics", headers={"Authorization": "Bearer jobs"})
    assert "metrics" in r.json["error"]["message"]
    c.close()


def test_the_nil_uuid_is_not_a_lease_id(client):
    """A client may propose its lease id, but not the nil UUID: it is what an id left unset
    looks like, and two clients proposing it would both be granted the one lease."""
    nil = "00000000-0000-0000-0000-000000000000"
    r = client.acquire("nil", owner="a", lease_id=nil)
    assert r.status == 400 and r.code == "invalid_lease_id" and r.json["error"]["field"] == "lease_id"
    assert client.get("nil").json["state"] == "free"
    own = "0d3d9875-ffa5-4520-b3e4-367071dd8f0b"
    assert client.acquire("nil", owner="a", lease_id=own).status == 200
    # Renew and release with it are only a lease that does not match.
    assert client.renew("nil", nil).status == 409
    assert client.release("nil", own).status == 200
