"""Load and abuse: thousands of idle connections, thousands of waiters on one resource,
and every option's bounds, while normal clients keep being served promptly."""

import re
import resource
import selectors
import socket
import subprocess
import threading
import time

import pytest

from harness import BIN, Client, Server

# A probe starved by hostile clients waits until they are cut off (seconds) or forever; a
# shared 2-core machine pauses a process for a second now and then. Between the two:
NOT_STARVED_S = 2.0

soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


class Probe(threading.Thread):
    """A normal client doing acquire and release all along, timing each request."""

    def __init__(self, server, prefix="probe"):
        super().__init__(daemon=True)
        self.server, self.prefix = server, prefix
        self.stop, self.latencies, self.failures = False, [], []

    def run(self):
        k = 0
        c = self.server.client(timeout=10)
        while not self.stop:
            k += 1
            name = "%s/%d" % (self.prefix, k % 5)
            t0 = time.monotonic()
            try:
                a = c.acquire(name, owner="probe", ttl_ms=5000)
                r = c.release(name, a.json["lease_id"])
                if a.status != 200 or r.status != 200:
                    self.failures.append((a, r))
            except Exception as e:
                self.failures.append(repr(e))
                c.close()
                c = self.server.client(timeout=10)
            self.latencies.append(time.monotonic() - t0)
            time.sleep(0.02)
        c.close()

    def finish(self):
        self.stop = True
        self.join(15)
        assert not self.failures, self.failures[:3]
        assert len(self.latencies) > 10
        return max(self.latencies)


def metric(c, name):
    m = re.search(r"^%s (\d+)" % re.escape(name), c.request("GET", "/metrics").body, re.M)
    return int(m.group(1)) if m else None


def test_10000_idle_connections_do_not_starve_normal_clients():
    with Server() as s:  # the defaults: 10,000 connections at most
        probe = Probe(s)
        probe.start()
        socks, refused = [], 0
        for _ in range(10000):
            try:
                socks.append(socket.create_connection((s.host, s.port), timeout=5))
            except OSError:
                refused += 1
        time.sleep(3)  # the reaper works ten times a second
        closed = 0
        for sk in socks:
            sk.setblocking(False)
            try:
                if sk.recv(1) == b"":
                    closed += 1
            except BlockingIOError:
                pass
            except OSError:
                closed += 1
        worst = probe.finish()
        c = s.client()
        reaped = metric(c, "mutexd_http_connections_reaped_total")
        open_now = metric(c, "mutexd_http_connections")
        c.close()
        for sk in socks:
            sk.close()
        print("refused=%d closed=%d reaped=%d open=%d worst=%.3fs" % (
            refused, closed, reaped, open_now, worst))
        # Near the limit the idle ones were closed, oldest first, to keep room.
        assert refused + closed >= 1000
        assert open_now <= 9100
        assert worst < NOT_STARVED_S


def test_slow_bodies_are_cut_off_and_do_not_take_the_server():
    """500 connections, the whole limit, send a request's headers announcing a 64 KiB body
    and then one byte of it every 2 s, and the attacker opens a new one for each that is
    closed. A request has --idle-timeout-ms to arrive whole, whatever it sends meanwhile,
    and near the limit the connections that have waited longest on their client are
    closed: none lives on, and /healthz is answered all along."""
    with Server(args=["--max-connections", "500", "--idle-timeout-ms", "5000"]) as s:
        head = (b"POST /v1/resources/slow/acquire HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                b"Content-Type: application/json\r\nContent-Length: 65536\r\n\r\n{")

        def attack():
            sk = socket.create_connection((s.host, s.port), timeout=5)
            sk.sendall(head)
            sk.setblocking(False)
            return [sk, time.monotonic()]

        slots = [attack() for _ in range(500)]
        health = []  # (latency, status) of a fresh connection's GET /healthz

        def probe():
            while len(health) < 30:
                t0 = time.monotonic()
                try:
                    c = Client(s.host, s.port, timeout=10, retry=False)
                    st = c.request("GET", "/healthz").status
                    c.close()
                except Exception as e:
                    st = repr(e)
                health.append((time.monotonic() - t0, st))
                time.sleep(0.5)

        prober = threading.Thread(target=probe, daemon=True)
        prober.start()
        oldest_alive, closed = 0.0, 0
        t_end = time.monotonic() + 16
        while time.monotonic() < t_end:
            for slot in slots:
                sk, t0 = slot
                gone = False
                try:
                    gone = sk.recv(1024) == b""
                except BlockingIOError:
                    pass
                except OSError:
                    gone = True
                if not gone:
                    try:
                        sk.send(b" ")
                    except BlockingIOError:
                        pass
                    except OSError:
                        gone = True
                if gone:
                    closed += 1
                    sk.close()
                    try:
                        slot[:] = attack()
                    except OSError:  # not accepted yet: try again next round
                        slot[:] = [socket.socket(), time.monotonic()]
                else:
                    oldest_alive = max(oldest_alive, time.monotonic() - t0)
            time.sleep(2)
        prober.join(30)
        for sk, _ in slots:
            sk.close()
        print("closed %d; the oldest slow body alive was %.1fs old; /healthz %s" % (
            closed, oldest_alive, [(round(t, 2), st) for t, st in health]))
        # 5 s from the request, the reaper's 0.1 s, and this loop's 2 s between looks.
        assert oldest_alive < 5 + 2.5, oldest_alive
        assert closed >= 500
        assert len(health) == 30 and all(st == 200 for _, st in health), health
        assert max(t for t, _ in health) < NOT_STARVED_S


def test_10000_waiters_on_one_resource():
    # --max-waiters 1024; connections for the 10,000 and the test's own few, so that none
    # of them is one of the spare connections kept for the probes (503 past the limit).
    with Server(args=["--max-connections", "10100"]) as s:
        c = s.client()
        holder = c.acquire("hot", owner="holder", ttl_ms=60000).json
        probe = Probe(s, prefix="elsewhere")
        probe.start()
        body = b'{"owner":"w","wait_ms":60000}'
        req = (b"POST /v1/resources/hot/acquire HTTP/1.1\r\nHost: 127.0.0.1\r\n"
               b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
        socks = []
        for _ in range(10000):
            sk = socket.create_connection((s.host, s.port), timeout=10)
            sk.sendall(req)
            socks.append(sk)
        # Past the cap: 429 at once; under it: still waiting. Read them all together.
        statuses = {}
        sel = selectors.DefaultSelector()
        for sk in socks:
            sk.setblocking(False)
            sel.register(sk, selectors.EVENT_READ)
        answered = set()
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and len(answered) < 10000 - 1024:
            for key, _ in sel.select(timeout=0.5):
                sk = key.fileobj
                data = sk.recv(200)
                st = int(data.split(b" ")[1]) if data.startswith(b"HTTP/1.1 ") else None
                statuses[st] = statuses.get(st, 0) + 1
                answered.add(sk)
                sel.unregister(sk)
        time.sleep(1)  # anything else would have come by now
        for key, _ in sel.select(timeout=0):
            statuses["late"] = statuses.get("late", 0) + 1
        statuses["waiting"] = 10000 - sum(statuses.values())
        waiting = c.get("hot").json["waiters"]
        print("statuses", statuses, "waiters", waiting)
        assert statuses.get(429) == 10000 - 1024
        assert statuses.get("waiting") == 1024 and waiting == 1024
        worst = probe.finish()
        assert worst < NOT_STARVED_S
        # One waiter, the first in line, gets it when the holder lets go; nobody else does.
        # (Which socket is first is the server's order of reading them, not the order they
        # were opened in: FIFO itself is tested in test_contention.py.)
        c.release("hot", holder["lease_id"])
        granted = []

        def read_ready(timeout):
            for key, _ in sel.select(timeout=timeout):
                granted.append(key.fileobj.recv(200))
                sel.unregister(key.fileobj)

        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not granted:
            read_ready(0.5)
        time.sleep(0.5)
        read_ready(0)
        assert len(granted) == 1 and granted[0].startswith(b"HTTP/1.1 200"), granted
        for sk in socks:
            sk.close()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and c.get("hot").json["waiters"] > 0:
            time.sleep(0.1)
        assert c.get("hot").json["waiters"] == 0  # every hang-up was noticed
        c.close()


NUMERIC_FLAGS = [  # flag, min, max
    ("--threads", 1, 1024),
    ("--min-ttl-ms", 1, 2592000000),
    ("--max-ttl-ms", 1, 2592000000),
    ("--max-wait-ms", 0, 86400000),
    ("--max-waiters", 1, 1000000),
    ("--max-connections", 16, 1000000),
    ("--idle-timeout-ms", 1000, 3600000),
    ("--max-actors", 1000, 100000000),
    ("--restore-grace-ms", 0, 2592000000),
    ("--snapshot-every-changes", 1, 100000000),
    ("--snapshot-every-ms", 1000, 86400000),
    ("--mirror-takeover-ms", 1000, 600000),
]


@pytest.mark.parametrize("flag,lo,hi", NUMERIC_FLAGS)
def test_every_numeric_flag_has_its_bounds(tmp_path, flag, lo, hi):
    def run(value):
        args = [BIN, "--listen", "127.0.0.1:0", "--data-dir", str(tmp_path / "d"), flag, str(value)]
        if flag == "--min-ttl-ms":
            args += ["--max-ttl-ms", "2592000000"]
        if flag == "--max-ttl-ms":
            args += ["--min-ttl-ms", "1"]
        return args

    for bad in ([lo - 1] if lo > 0 else [-1]) + [hi + 1, "12x", ""]:
        out = subprocess.run(run(bad), capture_output=True, text=True, timeout=10)
        assert out.returncode == 2, (flag, bad, out.stderr)
        assert flag in out.stderr or "must not be empty" in out.stderr, out.stderr
    for good in (lo, hi):
        s = Server(data_dir=str(tmp_path / ("d%s" % good)), args=run(good)[5:]).start()
        s.stop()


@pytest.mark.parametrize("flag,env", [("--threads", "MUTEXD_THREADS"),
                                      ("--max-waiters", "MUTEXD_MAX_WAITERS")])
def test_a_bad_environment_value_is_refused_too(tmp_path, flag, env):
    import os
    out = subprocess.run([BIN, "--listen", "127.0.0.1:0", "--data-dir", str(tmp_path / "d")],
                         capture_output=True, text=True, timeout=10,
                         env=dict(os.environ, **{env: "0"}))
    assert out.returncode == 2 and env in out.stderr


def test_remaining_api_limits(server, client):
    # break's reason: 1024 bytes
    assert client.brk("x", reason="r" * 1024).status == 200
    r = client.brk("x", reason="r" * 1025)
    assert r.status == 400 and r.json["error"]["field"] == "reason"
    # list's prefix and cursor: 256 bytes
    assert client.request("GET", "/v1/resources?prefix=" + "p" * 256).status == 200
    r = client.request("GET", "/v1/resources?prefix=" + "p" * 257)
    assert r.status == 400 and r.json["error"]["field"] == "prefix"
    r = client.request("GET", "/v1/resources?cursor=" + "c" * 257)
    assert r.status == 400 and r.json["error"]["field"] == "cursor"
    # watchers share the waiters' cap
    with Server(args=["--max-waiters", "2"]) as s:
        c = s.client()
        idx = c.get("w").json["index"]
        socks = []
        for _ in range(2):
            sk = socket.create_connection((s.host, s.port))
            sk.sendall(b"GET /v1/resources/w?index=%d&wait_ms=20000 HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n" % idx)
            socks.append(sk)
        time.sleep(0.3)
        r = c.get("w", "?index=%d&wait_ms=20000" % idx)
        assert r.status == 429 and r.code == "too_many_waiters"
        for sk in socks:
            sk.close()
        c.close()
