"""Mutual exclusion, fairness and liveness under contention, against a real server."""

import json
import os
import re
import signal
import socket
import threading
import time
import uuid

from harness import Server


def wait_for(pred, timeout=5.0, step=0.01):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(step)
    return pred()


def test_32_clients_never_overlap_and_tokens_follow_grant_order(server):
    """32 clients contend for one resource with wait_ms for 8 s. Each logs when it got
    the lease (after the answer arrived), its token, and when it let go (before sending the
    release). No two holds may overlap, and tokens must increase in grant order."""
    duration = 8.0
    log, errors = [], []
    lock = threading.Lock()
    stop_at = time.monotonic() + duration

    def worker(i):
        c = server.client(timeout=30)
        try:
            while time.monotonic() < stop_at:
                r = c.acquire("contended", owner="client-%d" % i, ttl_ms=10000, wait_ms=5000)
                if r.status == 409:
                    continue  # waited 5 s without a turn: try again
                if r.status != 200:
                    errors.append(r)
                    return
                got = time.monotonic()
                time.sleep(0.001)  # the critical section
                let_go = time.monotonic()
                with lock:
                    log.append((got, let_go, r.json["fencing_token"], i))
                rel = c.release("contended", r.json["lease_id"])
                if rel.status != 200:
                    errors.append(rel)
                    return
        finally:
            c.close()

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(32)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(duration + 60)
    assert not errors, errors[:3]
    log.sort()
    print("%d holds" % len(log))
    assert len(log) > 500, len(log)  # hand-offs actually happened
    for (g1, r1, t1, c1), (g2, r2, t2, c2) in zip(log, log[1:]):
        assert r1 < g2, "holds overlap: client %d [%f, %f] and client %d from %f" % (
            c1, g1, r1, c2, g2)
        assert t1 < t2, "tokens out of grant order: %d then %d" % (t1, t2)
    holders = {c for _, _, _, c in log}
    assert len(holders) == 32  # every client got its turns


def test_waiters_are_granted_in_arrival_order(server, client):
    first = client.acquire("fifo", owner="first", ttl_ms=30000).json
    n = 10
    order, results = [], {}
    lock = threading.Lock()

    def waiter(i):
        c = server.client()
        r = c.acquire("fifo", owner="waiter-%d" % i, ttl_ms=30000, wait_ms=20000)
        with lock:
            order.append(i)
            results[i] = r
        c.release("fifo", r.json["lease_id"])  # pass it on
        c.close()

    threads = []
    for i in range(n):
        t = threading.Thread(target=waiter, args=(i,))
        t.start()
        threads.append(t)
        # Queue them one at a time, so their arrival order is known.
        assert wait_for(lambda: client.get("fifo").json["waiters"] == i + 1)
    client.release("fifo", first["lease_id"])
    for t in threads:
        t.join(30)
    assert order == list(range(n))
    tokens = [results[i].json["fencing_token"] for i in range(n)]
    assert tokens == sorted(tokens) and len(set(tokens)) == n


def test_expired_lease_is_free_within_ttl_plus_100ms_and_waiter_gets_it(server, client):
    """A lease that is not renewed is free within ttl_ms + 100 ms, and a waiter gets it then.
    The grant is committed (fsync) before the waiter hears of it, and a shared disk stalls
    now and then: five measurements, four of them within 100 ms, none beyond a second."""
    ttl = 1000
    late = []
    for k in range(5):
        client.acquire("exp/%d" % k, owner="crashed", ttl_ms=ttl)
        t_acquired = time.monotonic()
        out = {}

        def waiter():
            c = server.client()
            out["r"] = c.acquire("exp/%d" % k, owner="next", wait_ms=5000)
            out["t"] = time.monotonic()
            c.close()

        t = threading.Thread(target=waiter)
        t.start()
        t.join(10)
        assert out["r"].status == 200 and out["r"].json["owner"] == "next"
        late.append(out["t"] - t_acquired - ttl / 1000)
    late.sort()
    print("waiter granted after the TTL by (s):", ["%.3f" % x for x in late])
    assert late[0] >= -0.05, late  # never early
    assert late[3] <= 0.1, late
    assert late[4] <= 1.0, late

    # Without a waiter: free when asked right after the TTL.
    free_after = []
    for k in range(5):
        client.acquire("exp2/%d" % k, owner="crashed", ttl_ms=ttl)
        t0 = time.monotonic()
        assert wait_for(lambda: client.get("exp2/%d" % k).json["state"] == "free", timeout=3,
                        step=0.005)
        free_after.append(time.monotonic() - t0 - ttl / 1000)
    free_after.sort()
    assert free_after[3] <= 0.1 and free_after[4] <= 1.0, free_after


def test_waiter_that_hangs_up_is_never_granted(server, client):
    holder = client.acquire("hang", owner="holder", ttl_ms=30000).json
    body = b'{"owner":"quitter","wait_ms":20000}'
    sock = socket.create_connection((server.host, server.port))
    sock.sendall(b"POST /v1/resources/hang/acquire HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                 b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                 % (len(body), body))
    assert wait_for(lambda: client.get("hang").json["waiters"] == 1)
    out = {}

    def patient():
        c = server.client()
        out["r"] = c.acquire("hang", owner="patient", wait_ms=20000)
        c.close()

    t = threading.Thread(target=patient)
    t.start()
    assert wait_for(lambda: client.get("hang").json["waiters"] == 2)
    sock.close()  # the first waiter goes away
    assert wait_for(lambda: client.get("hang").json["waiters"] == 1), \
        "the hang-up was not noticed"
    client.release("hang", holder["lease_id"])
    t.join(10)
    r = out["r"]
    assert r.status == 200 and r.json["owner"] == "patient"
    # The quitter never held it: the patient waiter got the very next token.
    assert r.json["fencing_token"] == holder["fencing_token"] + 1
    g = client.get("hang").json
    assert g["holder"]["owner"] == "patient"


def send_and_leave(s, method, path, body):
    """Sends one whole request and closes the connection without reading an answer, as a
    client whose timeout ran out."""
    data = json.dumps(body).encode()
    sock = socket.create_connection((s.host, s.port))
    sock.sendall(b"%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                 b"Content-Length: %d\r\n\r\n%s" % (method.encode(), path.encode(), len(data),
                                                     data))
    sock.close()


def test_changes_whose_clients_gave_up_on_a_paused_server_are_not_made():
    """A server paused (SIGSTOP) while three clients send an acquire, a release and a break
    and give up (close the connection): resumed, it makes none of them. Made late, the
    acquire would grant a lease that no client holds (its client has retried elsewhere and
    released it since, say), the release and break would end a lease that is held."""
    with Server() as s:
        c = s.client()
        held = c.acquire("paused/held", owner="holder", ttl_ms=60000).json
        os.kill(s.proc.pid, signal.SIGSTOP)
        try:
            send_and_leave(s, "POST", "/v1/resources/paused/ghost/acquire",
                           {"owner": "gone", "ttl_ms": 60000, "lease_id": str(uuid.uuid4())})
            send_and_leave(s, "POST", "/v1/resources/paused/held/release",
                           {"lease_id": held["lease_id"]})
            send_and_leave(s, "POST", "/v1/resources/paused/held/break", {})
            time.sleep(0.2)
        finally:
            os.kill(s.proc.pid, signal.SIGCONT)
        assert wait_for(lambda: re.search(r"^mutexd_http_changes_dropped_total 3$",
                                          c.request("GET", "/metrics").body, re.M)), \
            c.request("GET", "/metrics").body
        assert c.get("paused/ghost").json["state"] == "free"
        g = c.get("paused/held").json
        assert g["state"] == "held" and g["holder"]["fencing_token"] == held["fencing_token"], g
        # A client that stays is answered as ever.
        assert c.acquire("paused/ghost", owner="here").status == 200


def test_128_requests_arriving_at_once_are_answered_at_once():
    """128 keep-alive connections whose requests all arrive while the server is paused:
    resumed, it answers every one at once. (libmicrohttpd's epoll loop takes events 128 at
    a time and, given a full batch, waited for one more event or its timeout, seconds
    away, before serving the batch: a closed-loop load of 128 connections stopped dead.)
    Three rounds, each on new connections: the first did not always show it."""
    req = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
    with Server(args=["--threads", "1", "--idle-timeout-ms", "60000"]) as s:
        for rnd in range(3):
            socks = []
            try:
                for _ in range(128):
                    sk = socket.create_connection((s.host, s.port), timeout=5)
                    socks.append(sk)
                    sk.sendall(req)
                    assert sk.recv(4096).startswith(b"HTTP/1.1 200"), "not served before"
                time.sleep(0.5)  # the server idle, waiting for events
                os.kill(s.proc.pid, signal.SIGSTOP)
                try:
                    for sk in socks:
                        sk.sendall(req)
                    time.sleep(0.2)
                finally:
                    os.kill(s.proc.pid, signal.SIGCONT)
                t0 = time.monotonic()
                answered = 0
                for sk in socks:
                    try:
                        answered += sk.recv(4096).startswith(b"HTTP/1.1 200")
                    except socket.timeout:
                        break
                took = time.monotonic() - t0
                assert answered == 128 and took < 2, (rnd, answered, took)
            finally:
                for sk in socks:
                    sk.close()


def test_watcher_that_hangs_up_is_dropped(server, client):
    g = client.get("wh").json
    sock = socket.create_connection((server.host, server.port))
    sock.sendall(b"GET /v1/resources/wh?index=%d&wait_ms=20000 HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
                 % g["index"])
    assert wait_for(lambda: "mutexd_watchers 1" in client.request("GET", "/metrics").body)
    sock.close()
    assert wait_for(lambda: "mutexd_watchers 0" in client.request("GET", "/metrics").body)


def test_many_resources_in_parallel(server):
    """Leases on different resources do not interfere: 16 clients, 50 resources each."""
    errors = []

    def worker(i):
        c = server.client()
        for k in range(50):
            name = "par/%d/%d" % (i, k)
            a = c.acquire(name, owner="w%d" % i, ttl_ms=5000)
            if a.status != 200:
                errors.append(a)
                continue
            if c.renew(name, a.json["lease_id"]).status != 200:
                errors.append("renew")
            if c.release(name, a.json["lease_id"]).status != 200:
                errors.append("release")
        c.close()

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors[:3]
    c = server.client()
    assert c.request("GET", "/v1/resources?prefix=par/").json["resources"] == []
    c.close()
