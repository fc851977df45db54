"""A server group (--ha) of three real servers on loopback over one real Azurite container:
election, forwarding, takeover after SIGKILL and SIGSTOP, handover on SIGTERM, racing
standbys. Checked from the clients' side: every change answered 2xx is there after each
takeover, fencing tokens only grow, and no lease is granted to two holders at once."""

import json
import os
import re
import signal
import threading
import time
import uuid

import pytest

from azure import Azurite
from ha_history import GroupClient, check, run_load
from harness import BIN, Server, free_port, recv_to_close

# Sanitizer builds are several times slower: the safety checks stay, the time bounds grow.
SLOW = 3.0 if ("asan" in BIN or "tsan" in BIN) else 1.0


@pytest.fixture(scope="module")
def azurite():
    a = Azurite()
    yield a
    a.stop()


class Group:
    """Three servers of one group, each on a port chosen before it starts (its advertised
    URL must be known to it)."""

    def __init__(self, az, n=3, extra=(), env=None):
        self.az = az
        self.container = "g" + uuid.uuid4().hex[:20]
        self.extra = list(extra)
        self.env = env or {}
        self.servers = [self.make() for _ in range(n)]

    def make(self, port=None):
        port = port or free_port()
        url = "http://127.0.0.1:%d" % port
        s = Server(listen="127.0.0.1:%d" % port, env=self.env,
                   args=["--ha", "--advertise-url", url, "--mirror", "sync",
                         "--blob-connection-string", self.az.connection_string,
                         "--blob-container", self.container] + self.extra)
        s.url = url
        return s

    def start(self):
        for s in self.servers:
            s.start()
        return self

    def stop(self):
        for s in self.servers:
            if s.proc and s.proc.poll() is None:
                s.stop()

    def alive(self):
        return [s for s in self.servers if s.proc and s.proc.poll() is None]

    def view(self, s):
        c = s.client(timeout=5)
        try:
            r = c.request("GET", "/v1/servers")
            return r.json if r.status == 200 else None
        except OSError:
            return None
        finally:
            c.close()

    def active(self, timeout=20, among=None):
        """The server every live one names as active, once they agree."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            live = among or self.alive()
            views = [self.view(s) for s in live]
            urls = {v["active"]["url"] if v and v["active"] else None for v in views}
            roles = [v["self"]["role"] if v else None for v in views]
            if len(urls) == 1 and None not in urls and roles.count("active") == 1:
                url = urls.pop()
                return next(s for s in self.servers if s.url == url)
            time.sleep(0.1)
        raise AssertionError("no agreed active server: %r" % [self.view(s) for s in self.alive()])

    def standbys(self, active):
        return [s for s in self.alive() if s is not active]


@pytest.fixture
def group(azurite):
    g = Group(azurite)
    yield g
    g.stop()


def wait_write(servers, resource, timeout, owner="probe"):
    """Acquires `resource` through any of `servers` until one answers 200; returns the
    answer and when it came."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for s in servers:
            c = s.client(timeout=5)
            try:
                r = c.acquire(resource, owner=owner, ttl_ms=30000)
                if r.status == 200:
                    return r, time.monotonic()
            except OSError:
                pass
            finally:
                c.close()
        time.sleep(0.02)
    raise AssertionError("no server granted %s within %.1f s" % (resource, timeout))


def test_one_server_is_active_and_the_others_forward_to_it(group):
    group.start()
    active = group.active()
    standbys = group.standbys(active)
    assert len(standbys) == 2
    for s in standbys:
        deadline = time.monotonic() + 5
        v = group.view(s)
        while time.monotonic() < deadline and v["active"]["generation"] < 1:
            time.sleep(0.1)  # a standby reads the owner blob ten times a second
            v = group.view(s)
        assert v["self"] == {"url": s.url, "role": "standby"}
        assert v["active"]["url"] == active.url and v["active"]["generation"] >= 1
    c = standbys[0].client()
    r = c.acquire("job", owner="w1", ttl_ms=30000)
    assert r.status == 200, r
    assert r.header("mutexd-served-by") == active.url
    lease = r.json
    # The same answer from the other standby and from the active.
    r2 = standbys[1].client().acquire("job", owner="w2", ttl_ms=30000)
    assert r2.status == 409 and r2.json["error"]["code"] == "lease_held", r2
    assert r2.header("retry-after")
    g = active.client().get("job")
    assert g.json["state"] == "held"
    assert g.json["holder"]["fencing_token"] == lease["fencing_token"]
    # Every server lists the whole group.
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        urls = {x["url"] for x in group.view(standbys[1])["servers"]}
        if urls == {s.url for s in group.servers}:
            break
        time.sleep(0.2)
    assert urls == {s.url for s in group.servers}
    # Standbys follow the journal: their copy's lag is known.
    time.sleep(1.5)
    for x in group.view(standbys[1])["servers"]:
        assert isinstance(x["lag_changes"], int) and isinstance(x["lag_ms"], int), x
    # Readiness per role; metrics name the role.
    assert standbys[0].client().request("GET", "/readyz").status == 200
    m = standbys[0].client().request("GET", "/metrics").body
    assert 'mutexd_role{role="standby"} 1' in m


def test_sigkill_of_the_active_loses_no_answered_change(group):
    group.start()
    active = group.active()
    ca = active.client()
    held = {}
    for i in range(20):
        r = ca.acquire("k%d" % i, owner="w", ttl_ms=60000)
        assert r.status == 200, r
        held["k%d" % i] = r.json
    top = max(x["fencing_token"] for x in held.values())
    t0 = time.monotonic()
    active.kill()
    r, t1 = wait_write(group.alive(), "after-kill", timeout=15)
    took = t1 - t0
    assert took <= 5.5 * SLOW, "takeover took %.2f s" % took
    assert r.json["fencing_token"] > top
    new = group.active()
    assert new is not active
    assert any("restoring from the warm copy" in l for l in new.lines), new.lines[-20:]
    cn = new.client()
    for name, lease in held.items():
        g = cn.get(name).json
        assert g["state"] == "held", (name, g)
        assert g["holder"]["fencing_token"] == lease["fencing_token"]
        # its holder renews it, same token
        rr = cn.renew(name, lease["lease_id"])
        assert rr.status == 200 and rr.json["fencing_token"] == lease["fencing_token"], rr
    # Every server names the new active with the generation it serves, the one its log says;
    # and none lists the dead server as active, though its heartbeat says so for a while. A
    # standby reads the owner blob at its next tick: it may have read it while the new active
    # had named itself but not yet its generation, and says so until that tick.
    served = [l for l in new.lines if "serving as the active server" in l][-1]
    gen = int(re.search(r"generation=(\d+)", served).group(1))
    for s in group.alive():
        want = {"url": new.url, "generation": gen}
        deadline = time.monotonic() + 5 * SLOW
        while True:
            v = group.view(s)
            got = {k: v["active"][k] for k in want} if v and v.get("active") else None
            if got == want or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert got == want, v
        for x in v["servers"]:
            if x["url"] == active.url:
                assert x["role"] != "active", v


def test_sigterm_hands_over_in_under_a_second(group):
    group.start()
    active = group.active()
    standbys = group.standbys(active)
    assert active.client().acquire("before", owner="w", ttl_ms=60000).status == 200
    t0 = time.monotonic()
    active.proc.send_signal(signal.SIGTERM)
    r, t1 = wait_write(standbys, "after-term", timeout=10)
    assert t1 - t0 < 1.0 * SLOW, "handover took %.2f s" % (t1 - t0)
    assert active.proc.wait(timeout=20) == 0
    new = group.active(among=standbys)
    assert new.client().get("before").json["state"] == "held"


def test_requests_waiting_when_a_server_starts_are_answered(azurite):
    """Clients of a restarting server connect as soon as it listens: their requests wait in
    the listen queue and are read the moment it starts. A server of a group has no leases
    to serve them with until it knows the group, so it holds them, and serves them once it
    is the active; it must not serve them before (it crashed so, in a rolling restart).
    Five starts, 16 clients each."""
    import socket
    g = Group(azurite, n=1)
    port = int(g.servers[0].url.rsplit(":", 1)[1])

    def early(name, answers, stop):
        body = b'{"owner":"w","ttl_ms":30000}'
        req = (b"POST /v1/resources/%s/acquire HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n"
               b"Content-Type: application/json\r\nContent-Length: %d\r\n"
               b"Connection: close\r\n\r\n" % (name.encode(), port, len(body)) + body)
        while not stop.is_set():
            try:
                c = socket.create_connection(("127.0.0.1", port), timeout=30)
            except OSError:
                time.sleep(0.001)
                continue
            try:
                c.sendall(req)
                got = recv_to_close(c)
                answers.append(got.split(b"\r\n", 1)[0].decode())
            except OSError as e:
                answers.append("error: %r" % e)
            finally:
                c.close()
            return

    for round in range(5):
        s = g.make(port)
        g.servers[0] = s
        answers, stop = [], threading.Event()
        threads = [threading.Thread(target=early, args=("early%d-%d" % (round, i), answers, stop))
                   for i in range(16)]
        for t in threads:
            t.start()
        time.sleep(0.2)  # every client is trying to connect before the server listens
        try:
            s.start()
            for t in threads:
                t.join(timeout=60)
        finally:
            stop.set()
        assert s.proc.poll() is None, "the server died:\n" + s.log()
        assert len(answers) == 16, answers
        # Held until the server takes the container over, then served.
        assert answers == ["HTTP/1.1 200 OK"] * 16, answers
        s.stop()


def test_two_standbys_racing_for_one_takeover_one_wins(group):
    group.start()
    active = group.active()
    standbys = group.standbys(active)
    active.kill()
    new = group.active(timeout=20, among=standbys)
    # Exactly one took the container; the other forwards to it.
    took = [s for s in standbys if any("serving as the active server" in l for l in s.lines)]
    assert took == [new], [s.url for s in took]
    other = next(s for s in standbys if s is not new)
    assert group.view(other)["self"]["role"] == "standby"
    # Losing the race is expected, not an error an operator must look at.
    errors = [l for s in standbys for l in s.lines if "level=error" in l]
    assert errors == [], errors
    r = other.client().acquire("x", owner="w", ttl_ms=30000)
    assert r.status == 200 and r.header("mutexd-served-by") == new.url


def test_a_frozen_active_is_fenced_and_rejoins_as_a_standby(group):
    group.start()
    active = group.active()
    standbys = group.standbys(active)
    ca = active.client(timeout=30)
    assert ca.acquire("before", owner="w", ttl_ms=60000).status == 200
    active.proc.send_signal(signal.SIGSTOP)
    try:
        r, _ = wait_write(standbys, "during", timeout=15)
        new = group.active(among=standbys)
    finally:
        active.proc.send_signal(signal.SIGCONT)
    # The old active answers no change with 2xx after the takeover...
    answers = []
    for i in range(5):
        try:
            answers.append(active.client(timeout=5).acquire("late%d" % i, owner="old").status)
        except OSError:
            answers.append(None)
    assert 200 not in answers, answers
    # ... and comes back as a standby that forwards to the new active.
    deadline = time.monotonic() + 20
    role = None
    while time.monotonic() < deadline:
        v = group.view(active)
        role = v and v["self"]["role"]
        if role == "standby" and v["active"]["url"] == new.url:
            break
        time.sleep(0.2)
    assert role == "standby", active.lines[-20:]
    cn = new.client()
    assert cn.get("before").json["state"] == "held"
    assert cn.get("during").json["state"] == "held"
    for i in range(5):
        assert cn.get("late%d" % i).json["state"] != "held"


RESOURCES = ["r%d" % i for i in range(24)]


def group_get(group):
    c = GroupClient([s.url for s in group.alive()])

    def get(res):
        return c.request("GET", "/v1/resources/%s" % res, deadline=time.monotonic() + 20)
    return get


def loaded(group, seconds_before=2.0):
    """Starts 32 workers on the group; returns (history, stop, threads, finals)."""
    stop = threading.Event()
    history, threads, finals = run_load([s.url for s in group.servers], RESOURCES, stop)
    time.sleep(seconds_before)
    return history, stop, threads, finals


def finish(group, history, stop, threads, finals):
    stop.set()
    for t in threads:
        t.join(timeout=60)
    bad = check(history, group_get(group), finals)
    statuses = {}
    for e in history.events:
        statuses[e["status"]] = statuses.get(e["status"], 0) + 1
    print("answers by status:", statuses)
    answered = [e for e in history.events if e["status"] == 200]
    assert len(answered) > 100, "too little load: %r" % statuses
    if bad and os.environ.get("MUTEXD_HA_HISTORY"):
        with open(os.environ["MUTEXD_HA_HISTORY"], "w") as f:
            json.dump({"events": history.events,
                       "logs": {s.url: s.lines for s in group.servers}}, f)
    assert not bad, "\n".join(bad[:20])
    return history


@pytest.fixture
def fast_group(azurite):
    g = Group(azurite, extra=["--failover-grace-ms", "3000"])
    yield g
    g.stop()


@pytest.mark.heavy
def test_sigkill_of_the_active_under_load_three_times(fast_group):
    g = fast_group.start()
    history, stop, threads, finals = loaded(g)
    try:
        for round in range(3):
            active = g.active()
            port = int(active.url.rsplit(":", 1)[1])
            active.kill()
            new = g.active(timeout=20 * SLOW)
            assert new is not active
            time.sleep(2)
            # The killed server comes back, as a standby, on its own address.
            back = g.make(port)
            g.servers[g.servers.index(active)] = back
            back.start()
            time.sleep(1)
    finally:
        finish(g, history, stop, threads, finals)


@pytest.mark.heavy
def test_a_frozen_active_under_load_answers_nothing_after_the_takeover(fast_group):
    g = fast_group.start()
    active = g.active()
    history, stop, threads, finals = loaded(g)
    active.proc.send_signal(signal.SIGSTOP)
    t_stop = time.monotonic()
    try:
        new = g.active(timeout=20 * SLOW, among=g.standbys(active))
        t_took = time.monotonic()
        time.sleep(max(0, 20 - (time.monotonic() - t_stop)))
    finally:
        active.proc.send_signal(signal.SIGCONT)
    # The old active may have answered what it had finished before it froze; nothing
    # sent to it after the takeover may be a 2xx change.
    c = active.client(timeout=10)
    for i in range(5):
        try:
            st = c.acquire("late%d" % i, owner="old").status
        except OSError:
            st = None
        assert st != 200, "the old active granted after the takeover"
    deadline = time.monotonic() + 20 * SLOW
    while time.monotonic() < deadline:
        v = g.view(active)
        if v and v["self"]["role"] == "standby" and v["active"]["url"] == new.url:
            break
        time.sleep(0.2)
    assert v and v["self"]["role"] == "standby", active.lines[-20:]
    time.sleep(2)
    finish(g, history, stop, threads, finals)


@pytest.mark.heavy
def test_a_rolling_restart_under_load_fails_no_request(fast_group):
    g = fast_group.start()
    history, stop, threads, finals = loaded(g)
    for i in range(len(g.servers)):
        s = g.servers[i]
        port = int(s.url.rsplit(":", 1)[1])
        s.stop()
        again = g.make(port)
        g.servers[i] = again
        again.start()
        g.active(timeout=20 * SLOW)
        time.sleep(1)
    stop.set()
    for t in threads:
        t.join(timeout=60)
    # A renew is sent with no more time than its lease has left, so one sent in the
    # last few hundred milliseconds of its lease, as a handover begins, can end
    # unanswered with nothing lost: its lease was ending anyway. Every request that
    # had a second or more is answered.
    unanswered = [e for e in history.events if e["status"] is None]
    print("unanswered with less than 1 s to go: %d" %
          sum(1 for e in unanswered if e["budget"] < 1.0))
    unanswered = [e for e in unanswered if e["budget"] >= 1.0]
    assert not unanswered, "%d requests got no answer, e.g. %r" % (len(unanswered),
                                                                 unanswered[:3])
    finish(g, history, stop, threads, finals)


class Blackhole:
    """A TCP proxy to Azurite that the test can cut: then it passes nothing either way."""

    def __init__(self, target_port):
        import socket
        self.target = target_port
        self.cut = threading.Event()
        self.lsock = socket.socket()
        self.lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.lsock.bind(("127.0.0.1", 0))
        self.lsock.listen(64)
        self.port = self.lsock.getsockname()[1]
        self.closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        import socket
        while not self.closed:
            try:
                c, _ = self.lsock.accept()
            except OSError:
                return
            u = socket.create_connection(("127.0.0.1", self.target))
            for a, b in ((c, u), (u, c)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    def _pipe(self, a, b):
        try:
            while True:
                data = a.recv(65536)
                if not data:
                    break
                while self.cut.is_set():
                    time.sleep(0.05)  # held, as a cut link holds it
                b.sendall(data)
        except OSError:
            pass
        finally:
            for x in (a, b):
                try:
                    x.close()
                except OSError:
                    pass

    def close(self):
        self.closed = True
        self.lsock.close()


@pytest.mark.heavy
def test_an_active_cut_off_from_the_blob_store_steps_down(azurite):
    g = Group(azurite, extra=["--failover-grace-ms", "3000"])
    hole = Blackhole(azurite.port)
    try:
        first = g.servers[0]
        cs = azurite.connection_string.replace(":%d/" % azurite.port, ":%d/" % hole.port)
        assert cs != azurite.connection_string
        first.args[first.args.index(azurite.connection_string)] = cs
        first.start()
        assert g.active(among=[first]) is first
        for s in g.servers[1:]:
            s.start()
        g.active()
        c = first.client(timeout=30)
        assert c.acquire("before", owner="w", ttl_ms=60000).status == 200
        hole.cut.set()
        # It stops answering changes...
        r = c.acquire("cut", owner="w", ttl_ms=60000)
        assert r.status == 503, r
        # ... and a standby takes over once its owner lease has run out.
        new = g.active(timeout=40, among=g.servers[1:])
        cn = new.client()
        assert cn.get("before").json["state"] == "held"
        assert cn.get("cut").json["state"] != "held"
        hole.cut.clear()
        deadline = time.monotonic() + 30 * SLOW
        v = None
        while time.monotonic() < deadline:
            v = g.view(first)
            if v and v["self"]["role"] == "standby" and v["active"]["url"] == new.url:
                break
            time.sleep(0.2)
        assert v and v["self"]["role"] == "standby", first.lines[-30:]
    finally:
        g.stop()
        hole.close()


LEADER_KINDS = {
    "python": ["/usr/bin/python3", "-u", "clients/examples/python/leader.py"],
    "node": ["node", "clients/examples/node/leader.mjs"],
    "go": ["GO_LEADER"],  # built when first used: go_leader()
    "mutexctl": ["bash", "clients/examples/shell/leader.sh"],
}


@pytest.mark.heavy
@pytest.mark.parametrize("kind", sorted(LEADER_KINDS))
def test_a_leader_keeps_its_lease_across_a_sigkill_of_the_active(group, kind):
    """Two workers of one kind (the examples, TTL 10 s) given every server's URL: the leader
    keeps its lease and fencing token while the active server is killed, and the other
    worker never leads."""
    from test_examples import ROOT, Worker, go_leader, mutexctl
    g = group.start()
    env = dict(os.environ, MUTEXD_URL=",".join(s.url for s in g.servers),
               MUTEXD_RESOURCE="ha/leader", MUTEXD_TTL_MS="10000", MUTEXD_RETRY_S="1",
               MUTEXCTL=mutexctl() or "", PYTHONPATH=os.path.join(ROOT, "clients", "python"))
    cmd = [go_leader()] if kind == "go" else [
        c if not c.startswith("clients/") else os.path.join(ROOT, c) for c in LEADER_KINDS[kind]]
    workers = [Worker(kind, cmd, env) for _ in range(2)]
    seen = GroupClient([s.url for s in g.servers])

    def holder():
        st, js = seen.request("GET", "/v1/resources/ha/leader", deadline=time.monotonic() + 1)
        if st == 200 and js["state"] == "held":
            return js["holder"]["owner"], js["holder"]["fencing_token"]
        return None

    try:
        deadline = time.monotonic() + 20
        first = None
        while time.monotonic() < deadline and not first:
            first = holder()
            time.sleep(0.1)
        assert first, [w.other for w in workers]
        time.sleep(2)
        g.active().kill()
        # Through the takeover and a while after it, the holder never changes.
        end = time.monotonic() + 15
        samples = []
        while time.monotonic() < end:
            h = holder()
            if h is not None:
                samples.append(h)
            time.sleep(0.1)
        assert samples and set(samples) == {first}, (first, sorted(set(samples)))
        assert all(w.proc.poll() is None for w in workers), [w.other for w in workers]
    finally:
        for w in workers:
            if w.proc.poll() is None:
                w.kill()
        seen.close()
