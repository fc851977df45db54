"""Forwarding: a standby sends every /v1 request to the active server and relays its answer
as given; it holds requests while no server is active, and refuses them once fenced.

Real processes: server A serves; server B's role is set through the fault seam
(MUTEXD_FAULT_ROLE, MUTEXD_FAULT_ROLE_AFTER_MS), as the group's state machine sets it.
A is given a Mutexd-Served-By URL with MUTEXD_FAULT_SERVED_BY (without --ha, which needs
blob storage)."""

import hashlib
import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
import uuid

import pytest

from harness import ROOT, Server, free_port


def url_of(port):
    return "http://127.0.0.1:%d" % port


@pytest.fixture
def active():
    port = free_port()
    s = Server(listen="127.0.0.1:%d" % port,
               env={"MUTEXD_FAULT_SERVED_BY": url_of(port)}).start()
    s.url = url_of(port)
    yield s
    s.stop()


def standby(role, timeout_ms=None, after=None, args=(), env=None):
    e = {"MUTEXD_FAULT_ROLE": role}
    if timeout_ms is not None:
        e["MUTEXD_FORWARD_TIMEOUT_MS"] = str(timeout_ms)
    if after is not None:
        e["MUTEXD_FAULT_ROLE_AFTER_MS"] = after
    e.update(env or {})
    return Server(env=e, args=list(args)).start()


def same_lease(a, b):
    """Two views of one resource taken a moment apart: equal but for the time left."""
    a, b = dict(a), dict(b)
    def timeless(h):
        return {k: x for k, x in h.items() if k != "expires_in_ms"}
    for v in (a, b):
        if isinstance(v.get("holder"), dict):
            v["holder"] = timeless(v["holder"])
        if isinstance(v.get("holders"), list):
            v["holders"] = [timeless(h) for h in v["holders"]]
        v.pop("expires_in_ms", None)
    return a == b


def test_lease_requests_through_a_standby_answer_as_the_active(active):
    b = standby("forward:" + active.url)
    try:
        cb, ca = b.client(), active.client()
        r = cb.post("fw/a", "acquire", {"owner": "one", "ttl_ms": 5000,
                                        "metadata": {"addr": "h:1"}},
                    headers={"X-Request-Id": "req-forward-1"})
        assert r.status == 200, r
        assert r.header("Mutexd-Served-By") == active.url
        assert r.header("X-Request-Id") == "req-forward-1"
        assert r.header("Content-Type").startswith("application/json")
        lease = r.json
        assert lease["owner"] == "one" and lease["metadata"] == {"addr": "h:1"}
        # The active holds it: the standby keeps nothing of its own.
        ra = ca.get("fw/a")
        assert ra.json["holder"]["fencing_token"] == lease["fencing_token"]

        held = cb.acquire("fw/a", owner="two")
        assert held.status == 409 and held.code == "lease_held", held
        assert int(held.header("Retry-After")) in (4, 5)
        assert held.json["error"]["holder"]["owner"] == "one"
        assert held.header("Mutexd-Served-By") == active.url

        renewed = cb.renew("fw/a", lease["lease_id"], ttl_ms=8000)
        assert renewed.status == 200 and renewed.json["ttl_ms"] == 8000, renewed
        assert renewed.json["fencing_token"] == lease["fencing_token"]

        gb, ga = cb.get("fw/a"), ca.get("fw/a")
        assert gb.status == 200 and same_lease(gb.json, ga.json), (gb, ga)
        lb, la = cb.request("GET", "/v1/resources?prefix=fw/"), ca.request(
            "GET", "/v1/resources?prefix=fw/")
        assert lb.status == 200 and len(lb.json["resources"]) == 1
        assert same_lease(lb.json["resources"][0], la.json["resources"][0])
        head = cb.request("HEAD", "/v1/resources/fw/a")
        assert head.status == 200 and head.body == ""

        lost = cb.release("fw/a", str(uuid.uuid4()))
        assert lost.status == 409 and lost.code == "lease_lost", lost
        rel = cb.release("fw/a", lease["lease_id"])
        assert rel.status == 200 and rel.json == {"resource": "fw/a", "released": True}
        assert ca.get("fw/a").json["state"] == "free"
        assert cb.brk("fw/a").json == {"resource": "fw/a", "broken": False}

        # The standby's own checks answer at once, without the active.
        bad = cb.post("fw/a", "acquire", {"owner": "x", "ttl": 5})
        assert bad.status == 400 and bad.code == "unknown_field", bad
        assert bad.header("Mutexd-Served-By") is None
        assert cb.request("GET", "/healthz").status == 200
        servers = cb.request("GET", "/v1/servers")
        assert servers.status == 200 and servers.json["self"]["role"] == "alone", servers
        assert servers.header("Mutexd-Served-By") is None  # answered here, not forwarded
        metrics = cb.request("GET", "/metrics").body
        assert 'mutexd_forwarded_requests_total{code="200"}' in metrics
        assert 'mutexd_forwarded_requests_total{code="409"} 2' in metrics
        assert 'mutexd_http_role{role="forward"} 1' in metrics
        cb.close()
        ca.close()
    finally:
        b.stop()


def tokens_file(path, tokens):
    with open(path, "w") as f:
        for name, (secret, scopes) in tokens.items():
            f.write("%s sha256:%s %s\n" % (name, hashlib.sha256(secret.encode()).hexdigest(),
                                           scopes))


def test_the_bearer_token_goes_to_the_active_after_the_standbys_own_check(tmp_path):
    path = str(tmp_path / "tokens")
    tokens_file(path, {"reader": ("r" * 40, "read"), "writer": ("w" * 40, "read,write")})
    with Server(args=["--auth-tokens", path]) as a:
        b = standby("forward:" + url_of(a.port), args=["--auth-tokens", path])
        try:
            cb = b.client()
            r = cb.post("t", "acquire", {"owner": "o"},
                        headers={"Authorization": "Bearer " + "w" * 40})
            assert r.status == 200, r
            r = cb.post("t", "acquire", {"owner": "o"},
                        headers={"Authorization": "Bearer " + "r" * 40})
            assert r.status == 403 and r.code == "forbidden", r
            r = cb.acquire("t")
            assert r.status == 401 and r.header("WWW-Authenticate"), r
            g = a.client().request("GET", "/v1/resources/t",
                                   headers={"Authorization": "Bearer " + "r" * 40})
            assert g.json["state"] == "held", g  # at the active: the token went with it
        finally:
            b.stop()


def test_a_blocking_acquire_through_a_standby_is_granted_when_the_holder_releases(active):
    b = standby("forward:" + active.url)
    try:
        ca = active.client()
        first = ca.acquire("fw/wait", owner="first", ttl_ms=30000).json
        out = {}

        def waiter():
            out["r"] = b.client().acquire("fw/wait", owner="second", wait_ms=20000)

        t = threading.Thread(target=waiter)
        t.start()
        deadline = time.time() + 10
        while ca.get("fw/wait").json["waiters"] != 1:
            assert time.time() < deadline, "the waiter never reached the active"
            time.sleep(0.05)
        assert ca.release("fw/wait", first["lease_id"]).status == 200
        t.join(10)
        assert not t.is_alive()
        r = out["r"]
        assert r.status == 200 and r.json["owner"] == "second", r
        assert r.json["fencing_token"] > first["fencing_token"]
        assert r.header("Mutexd-Served-By") == active.url
    finally:
        b.stop()


def raw_acquire(port, resource, body):
    data = json.dumps(body).encode()
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.sendall(b"POST /v1/resources/%s/acquire HTTP/1.1\r\nHost: 127.0.0.1\r\n"
              b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
              % (resource.encode(), len(data), data))
    return s


def wait_waiters(client, resource, n, timeout=10):
    deadline = time.time() + timeout
    while True:
        w = client.get(resource).json["waiters"]
        if w == n:
            return
        assert time.time() < deadline, "%d waiters, not %d" % (w, n)
        time.sleep(0.05)


def test_a_client_hanging_up_on_the_standby_is_dropped_at_the_active(active):
    b = standby("forward:" + active.url)
    try:
        ca = active.client()
        first = ca.acquire("fw/gone", owner="first", ttl_ms=30000).json
        s = raw_acquire(b.port, "fw/gone", {"owner": "quitter", "wait_ms": 30000})
        wait_waiters(ca, "fw/gone", 1)
        s.close()
        wait_waiters(ca, "fw/gone", 0)
        assert ca.release("fw/gone", first["lease_id"]).status == 200
        g = ca.get("fw/gone").json
        assert g["state"] == "free" and g["holder"] is None, g
        assert "mutexd_forward_abandoned_total 1" in b.client().request("GET", "/metrics").body
    finally:
        b.stop()


def test_hold_answers_no_active_server_after_the_forward_timeout():
    b = standby("hold", timeout_ms=1000)
    try:
        c = b.client()
        t0 = time.monotonic()
        r = c.acquire("fw/h")
        took = time.monotonic() - t0
        assert r.status == 503 and r.code == "unavailable", r
        assert r.json["error"]["reason"] == "no_active_server"
        assert r.header("Retry-After") == "1"
        assert 0.9 <= took < 5, took
        # Probes, metrics and /v1/servers are answered here at once.
        t0 = time.monotonic()
        assert c.request("GET", "/healthz").status == 200
        r = c.request("GET", "/v1/servers")  # no --ha: no group to name
        assert r.status == 200 and r.json["self"]["role"] == "alone", r
        assert time.monotonic() - t0 < 0.5
    finally:
        b.stop()


def test_a_held_request_goes_to_the_active_once_there_is_one(active):
    b = standby("hold", timeout_ms=5000, after="800:forward:" + active.url)
    try:
        t0 = time.monotonic()
        r = b.client().acquire("fw/later", owner="patient")
        assert r.status == 200 and r.json["owner"] == "patient", r
        assert r.header("Mutexd-Served-By") == active.url
        assert 0.6 <= time.monotonic() - t0 < 4
        assert active.client().get("fw/later").json["state"] == "held"
    finally:
        b.stop()


def test_a_change_held_for_an_active_is_dropped_when_its_client_gives_up(active):
    """An acquire held by a standby (no active yet) whose client gives up and closes its
    connection is not sent to the active when one appears: sent late, it would grant a
    lease no client holds."""
    b = standby("hold", timeout_ms=5000, after="1000:forward:" + active.url)
    try:
        data = json.dumps({"owner": "gone", "ttl_ms": 60000,
                           "lease_id": str(uuid.uuid4())}).encode()
        sock = socket.create_connection((b.host, b.port))
        sock.sendall(b"POST /v1/resources/fw/gone/acquire HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                     b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                     % (len(data), data))
        time.sleep(0.3)
        sock.close()
        # Once the active is there, a request through the standby goes to it at once.
        deadline = time.monotonic() + 5
        cb = b.client()
        while time.monotonic() < deadline:
            r = cb.get("fw/other")
            if r.status == 200 and r.header("Mutexd-Served-By") == active.url:
                break
            time.sleep(0.05)
        time.sleep(0.3)
        assert active.client().get("fw/gone").json["state"] == "free"
        body = cb.request("GET", "/metrics").body
        assert re.search(r"^mutexd_forward_abandoned_total 1$", body, re.M), body
    finally:
        b.stop()


def test_a_held_request_is_served_here_when_this_server_becomes_active():
    b = standby("hold", timeout_ms=5000, after="500:serve")
    try:
        t0 = time.monotonic()
        r = b.client().acquire("fw/here", owner="me")
        assert r.status == 200 and r.json["owner"] == "me", r
        assert time.monotonic() - t0 >= 0.3  # held until then
        assert b.client().get("fw/here").json["state"] == "held"
    finally:
        b.stop()


def test_fenced_refuses_every_v1_request_but_servers():
    b = standby("fenced")
    try:
        c = b.client()
        for r in (c.acquire("fw/f"), c.get("fw/f"), c.request("GET", "/v1/resources")):
            assert r.status == 503 and r.json["error"]["reason"] == "fenced", r
            assert r.header("Retry-After") == "1"
        r = c.request("GET", "/v1/servers")  # no --ha: no group to name
        assert r.status == 200 and r.json["self"]["role"] == "alone", r
        assert c.request("GET", "/healthz").status == 200
    finally:
        b.stop()


def dead_port():
    """A port bound and not listening, kept so while the socket lives: a connection to it is
    refused, and no connection can take it as its own source port (which would connect to
    itself)."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    return s, s.getsockname()[1]


def test_forward_to_a_dead_port_holds_then_answers_no_active_server():
    sock, port = dead_port()
    b = standby("forward:" + url_of(port), timeout_ms=1200)
    try:
        t0 = time.monotonic()
        r = b.client().acquire("fw/dead")
        took = time.monotonic() - t0
        assert r.status == 503 and r.json["error"]["reason"] == "no_active_server", (r, b.log())
        assert r.header("Retry-After") == "1"
        assert 1.0 <= took < 5, took
    finally:
        b.stop()
        sock.close()


def test_a_held_request_follows_the_active_to_its_new_url(active):
    # Forwarding to a dead server, then to the live one: the held request is not lost.
    sock, port = dead_port()
    b = standby("forward:" + url_of(port), timeout_ms=5000, after="700:forward:" + active.url)
    try:
        r = b.client().acquire("fw/moved")
        assert r.status == 200 and r.header("Mutexd-Served-By") == active.url, r
    finally:
        b.stop()
        sock.close()


def forward_counts(s):
    """(requests relayed, requests refused no_active_server) from server s's metrics."""
    body = s.client().request("GET", "/metrics").body
    relayed = sum(float(v) for v in
                  re.findall(r"^mutexd_forwarded_requests_total\{[^}]*\} (\S+)$", body, re.M))
    m = re.search(r'^mutexd_forward_refused_total\{reason="no_active_server"\} (\S+)$', body,
                  re.M)
    return relayed, float(m.group(1))


def test_two_servers_naming_each_other_pass_a_request_on_three_times_at_most():
    """Two servers whose views of the owner disagree, each naming the other: a request goes
    A, B, A, B, and B, the third server it crossed, answers 503 no_active_server at once,
    rather than the pair passing it back and forth until a timeout."""
    pa, pb = free_port(), free_port()
    env = {"MUTEXD_FORWARD_TIMEOUT_MS": "8000"}
    a = Server(listen="127.0.0.1:%d" % pa,
               env=dict(env, MUTEXD_FAULT_ROLE="forward:" + url_of(pb))).start()
    b = Server(listen="127.0.0.1:%d" % pb,
               env=dict(env, MUTEXD_FAULT_ROLE="forward:" + url_of(pa))).start()
    try:
        c = a.client(timeout=30)
        t0 = time.monotonic()
        r = c.acquire("fw/loop", owner="me", lease_id=str(uuid.uuid4()))
        took = time.monotonic() - t0
        assert r.status == 503 and r.json["error"]["reason"] == "no_active_server", r
        assert r.header("Retry-After") == "1"
        assert took < 2, took
        (ra, na), (rb, nb) = forward_counts(a), forward_counts(b)
        print("answered in %.3f s; relayed by A %d, by B %d; refused by A %d, by B %d"
              % (took, ra, rb, na, nb))
        assert (ra, rb, na, nb) == (2, 1, 0, 1)
        assert any("forwarded_too_many_times" in l for l in b.lines), b.log()
        # A GET and a list go the same way.
        for path in ("/v1/resources/fw/loop", "/v1/resources"):
            r = c.request("GET", path)
            assert r.status == 503 and r.json["error"]["reason"] == "no_active_server", r
    finally:
        a.stop()
        b.stop()


def test_the_active_lost_mid_request_is_active_lost():
    # A listener that accepts the request and closes without answering: it may have been
    # delivered, so it is not sent again.
    lsock = socket.socket()
    lsock.bind(("127.0.0.1", 0))
    lsock.listen(8)
    port = lsock.getsockname()[1]
    seen = []

    def accept_and_drop():
        lsock.settimeout(10)
        try:
            while True:
                conn, _ = lsock.accept()
                seen.append(conn.recv(65536))
                conn.close()
        except OSError:
            pass

    t = threading.Thread(target=accept_and_drop, daemon=True)
    t.start()
    b = standby("forward:" + url_of(port), timeout_ms=3000)
    try:
        r = b.client().acquire("fw/lost")
        assert r.status == 503 and r.json["error"]["reason"] == "active_lost", r
        assert r.header("Retry-After") == "1"
        assert seen and seen[0].startswith(b"POST /v1/resources/fw/lost/acquire HTTP/1.1")
    finally:
        b.stop()
        lsock.close()


def test_sigterm_on_the_standby_during_a_forwarded_wait_exits_promptly(active):
    b = standby("forward:" + active.url)
    ca = active.client()
    first = ca.acquire("fw/term", owner="first", ttl_ms=30000).json
    s = raw_acquire(b.port, "fw/term", {"owner": "waiting", "wait_ms": 60000})
    wait_waiters(ca, "fw/term", 1)
    t0 = time.monotonic()
    b.stop(timeout=10)
    assert time.monotonic() - t0 < 5
    answer = s.recv(65536)
    s.close()
    assert answer.startswith(b"HTTP/1.1 503"), answer
    # Its transfer closed with it: the active dropped the waiter.
    wait_waiters(ca, "fw/term", 0)
    assert ca.release("fw/term", first["lease_id"]).status == 200
    assert ca.get("fw/term").json["state"] == "free"


def forwarded(s):
    """How many requests server `s` has forwarded to the active, whatever their answers."""
    body = s.client().request("GET", "/metrics").body
    return sum(int(float(v)) for v in re.findall(
        r"^mutexd_forwarded_requests_total\{[^}]*\} (\S+)$", body, re.M))


NODE_CLIENT_RUN = r"""
import { Client } from './clients/node/index.js';
const c = new Client(process.argv[1].split(','));
for (let i = 0; i < 10; i++) {
  const lease = await c.acquire(`straight/node-${i}`, { ttlMs: 30000 });
  await c.release(lease);
}
console.log(c.url);
"""


@pytest.mark.parametrize("kind", ["python", "node"])
def test_a_client_given_a_standby_first_goes_straight_to_the_active(active, kind):
    """A client given a group's URLs with a standby first sends its first request there; the
    answer names the active (Mutexd-Served-By), one of the client's URLs: every later
    request goes to the active directly, not through the standby."""
    b = standby("forward:" + active.url)
    try:
        urls = [url_of(b.port), active.url]
        before = forwarded(b)
        if kind == "python":
            sys.path.insert(0, os.path.join(ROOT, "clients", "python"))
            import mutexd
            with mutexd.Client(urls) as c:
                for i in range(10):
                    lease = c.acquire("straight/py-%d" % i, ttl=30)
                    c.release(lease)
                assert c.url == active.url
        else:
            out = subprocess.run(["node", "--input-type=module", "-e", NODE_CLIENT_RUN,
                                  ",".join(urls)], cwd=ROOT, capture_output=True, text=True,
                                 timeout=60)
            assert out.returncode == 0, out.stderr
            assert out.stdout.strip() == active.url, out.stdout
        # 20 requests: only the first crossed the standby.
        assert forwarded(b) - before == 1
    finally:
        b.stop()


class FakeActive:
    """An "active" on a free port that answers GETs (keeping the connection alive) and reads
    every POST to the end, records it, and closes the connection without an answer: an
    active that died with the request in its socket buffer."""

    def __init__(self, away_s=None):
        self.away_s = away_s  # after a POST: stop listening for that long, then come back
        self.lsock = self.listen(0)
        self.port = self.lsock.getsockname()[1]
        self.url = url_of(self.port)
        self.posts = []
        self.gets = 0
        self.stopping = threading.Event()
        self.threads = [threading.Thread(target=self.accept, daemon=True)]
        self.threads[0].start()

    @staticmethod
    def listen(port):
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", port))
        s.listen(16)
        s.settimeout(0.05)
        return s

    def accept(self):
        while not self.stopping.is_set():
            if self.away_s and self.posts:
                self.lsock.close()  # away: a connection is refused
                time.sleep(self.away_s)
                self.away_s = None
                self.lsock = self.listen(self.port)
            try:
                conn, _ = self.lsock.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            t = threading.Thread(target=self.serve, args=(conn,), daemon=True)
            self.threads.append(t)
            t.start()

    def serve(self, conn):
        conn.settimeout(10)
        buf = b""
        try:
            while not self.stopping.is_set():
                while b"\r\n\r\n" not in buf:
                    chunk = conn.recv(65536)
                    if not chunk:
                        return
                    buf += chunk
                head, _, buf = buf.partition(b"\r\n\r\n")
                m = re.search(rb"(?im)^content-length:\s*(\d+)", head)
                n = int(m.group(1)) if m else 0
                while len(buf) < n:
                    chunk = conn.recv(65536)
                    if not chunk:
                        return
                    buf += chunk
                body, buf = buf[:n], buf[n:]
                if head.startswith(b"POST "):
                    self.posts.append(head.split(b"\r\n", 1)[0] + b" " + body)
                    return  # closed with the request read and no answer
                self.gets += 1
                answer = b'{"resource":"fw/x","state":"free"}\n'
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                             b"Mutexd-Served-By: %s\r\nContent-Length: %d\r\n\r\n%s"
                             % (self.url.encode(), len(answer), answer))
        except OSError:
            pass
        finally:
            conn.close()

    def close(self):
        self.stopping.set()
        self.lsock.close()
        for t in self.threads:
            t.join(timeout=5)


@pytest.mark.parametrize("away_s", [None, 0.4], ids=["listening", "restarting"])
@pytest.mark.parametrize("action,body", [
    ("break", {"reason": "stuck"}),
    ("break", {"reason": "stuck", "lease_id": "6f1c2a8e-3b4d-4e5f-8a9b-0c1d2e3f4a5b"}),
    ("acquire", {"owner": "one", "ttl_ms": 5000}),
])
def test_a_state_change_lost_on_a_kept_alive_connection_is_sent_once(action, body, away_s):
    # The connection to the active is kept alive by a GET, then the active reads a break
    # (or an acquire without a lease_id) and dies without answering. The request may have
    # been carried out: it must not be sent again, neither by the forwarder nor by libcurl's
    # own retry of a request on a reused connection that the peer closed, whether the active
    # still listens or refuses connections for a while (a restart) and then takes them again.
    fake = FakeActive(away_s)
    b = standby("forward:" + fake.url, timeout_ms=3000)
    try:
        c = b.client()
        for _ in range(2):
            assert c.get("fw/x").status == 200
        assert fake.gets == 2
        r = c.post("fw/x", action, body)
        assert r.status == 503 and r.json["error"]["code"] == "unavailable", (r, b.log())
        assert r.json["error"]["reason"] == "active_lost", r
        assert r.header("Retry-After") == "1"
        time.sleep(1.0)  # a resend would come now
        assert len(fake.posts) == 1, fake.posts
        assert fake.posts[0].startswith(b"POST /v1/resources/fw/x/%s HTTP/1.1"
                                        % action.encode()), fake.posts
        c.close()
    finally:
        b.stop()
        fake.close()


def test_an_acquire_with_a_lease_id_lost_on_a_kept_alive_connection_may_go_again():
    # The same, with a lease_id proposed: the acquire is idempotent, and libcurl's retry of
    # it on a fresh connection is allowed; the answer is still 503 active_lost.
    fake = FakeActive()
    b = standby("forward:" + fake.url, timeout_ms=3000)
    try:
        c = b.client()
        assert c.get("fw/x").status == 200
        r = c.acquire("fw/x", owner="one", ttl_ms=5000, lease_id=str(uuid.uuid4()))
        assert r.status == 503 and r.json["error"]["reason"] == "active_lost", (r, b.log())
        assert 1 <= len(fake.posts) <= 2, fake.posts
        c.close()
    finally:
        b.stop()
        fake.close()
