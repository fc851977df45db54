"""The service manager's notifications (sd_notify), as systemd receives them: a unix
datagram socket named by NOTIFY_SOCKET, here bound by the test. READY=1 comes once /readyz
answers 200, and not before; WATCHDOG=1 comes every half of WATCHDOG_USEC while the server
is healthy and stops while its store fails; RELOADING=1 and READY=1 around SIGHUP;
STOPPING=1 on SIGTERM. Skipped only for a build without libsystemd (no "+systemd" in
`mutexd --version`); scripts/deps.sh installs libsystemd-dev, so the test builds have it.

WATCHDOG_PID is left out: the test cannot know the server's pid before it starts, and
systemd's sd_watchdog_enabled() takes a missing WATCHDOG_PID as "this process"."""

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import uuid

import pytest

from harness import BIN, Server

FEATURES = subprocess.run([BIN, "--version"], capture_output=True, text=True).stdout.split()
pytestmark = pytest.mark.skipif("+systemd" not in FEATURES,
                                reason="mutexd built without libsystemd (MUTEXD_SYSTEMD)")

PING_US = 200000  # WATCHDOG_USEC: a ping every 100 ms


class Manager:
    """The service manager's end: every notification, with the time it arrived."""

    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="mutexd-notify-")
        self.path = os.path.join(self.dir, "notify")
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(self.path)
        self.sock.settimeout(0.2)
        self.messages = []  # (time.monotonic(), {name: value})
        self.lock = threading.Lock()
        self.running = True
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self):
        while self.running:
            try:
                data = self.sock.recv(4096)
            except socket.timeout:
                continue
            except OSError:
                return
            at = time.monotonic()
            fields = dict(line.split("=", 1) for line in data.decode().splitlines() if "=" in line)
            with self.lock:
                self.messages.append((at, fields))

    def env(self, watchdog=True):
        e = {"NOTIFY_SOCKET": self.path}
        if watchdog:
            e["WATCHDOG_USEC"] = str(PING_US)
        return e

    def with_field(self, name, value=None, since=0.0):
        with self.lock:
            return [(at, f) for at, f in self.messages
                    if at >= since and name in f and (value is None or f[name] == value)]

    def wait_for(self, name, value=None, since=0.0, timeout=15.0):
        """The first notification carrying name(=value) that arrived at or after `since`."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            got = self.with_field(name, value, since)
            if got:
                return got[0]
            time.sleep(0.005)
        raise AssertionError("no %s%s within %ss; got %r" % (
            name, "" if value is None else "=" + value, timeout, self.messages))

    def pings(self, since, until=None):
        return [at for at, _ in self.with_field("WATCHDOG", "1", since)
                if until is None or at <= until]

    def close(self):
        self.running = False
        self.sock.close()
        self.thread.join()
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture
def manager():
    m = Manager()
    yield m
    m.close()


def test_ready_then_pings_then_reload_then_stopping(manager):
    s = Server(env=manager.env())
    s.start()
    at, ready = manager.wait_for("READY", "1")
    c = s.client()
    # Ready means what /readyz says: it answers 200 the moment READY=1 has come.
    r = c.request("GET", "/readyz")
    assert r.status == 200, r
    assert ready.get("STATUS", "").startswith("ready"), ready
    assert s.address in ready["STATUS"], ready
    assert len(manager.with_field("READY", "1")) == 1

    # Healthy: a ping every 100 ms (half of WATCHDOG_USEC); at least 6 in one second on a
    # busy machine, and never a burst.
    t0 = time.monotonic()
    time.sleep(1.0)
    pings = manager.pings(t0, t0 + 1.0)
    assert 6 <= len(pings) <= 12, pings
    assert c.acquire("jobs/a", ttl_ms=5000).status == 200

    # SIGHUP rereads the tokens file: RELOADING=1 (with the time systemd 253 asks for),
    # then READY=1 again.
    t1 = time.monotonic()
    s.proc.send_signal(signal.SIGHUP)
    at_reload, reloading = manager.wait_for("RELOADING", "1", since=t1)
    assert int(reloading["MONOTONIC_USEC"]) > 0, reloading
    at_again, _ = manager.wait_for("READY", "1", since=at_reload)
    assert at_again >= at_reload

    # SIGTERM: STOPPING=1 before the server exits 0, and no ping after it.
    t2 = time.monotonic()
    c.close()
    s.stop()
    at_stop, stopping = manager.wait_for("STOPPING", "1", since=t2, timeout=2)
    assert stopping.get("STATUS", "").startswith("stopping"), stopping
    time.sleep(0.3)
    assert manager.pings(at_stop + 0.05) == []


def test_no_watchdog_asked_no_pings(manager):
    with Server(env=manager.env(watchdog=False)) as s:
        manager.wait_for("READY", "1")
        time.sleep(0.5)
        assert manager.pings(0) == []
        assert s.client().request("GET", "/readyz").status == 200


@pytest.mark.skipif("+fault-injection" not in FEATURES, reason="a build without fault seams")
def test_pings_stop_while_the_store_fails_and_resume_when_it_commits(manager):
    # Commits 1 to 3 fail: the acquire's, then the store's probes of the disk, one a second.
    env = dict(manager.env(), MUTEXD_FAULT_COMMIT="1:3")
    with Server(env=env) as s:
        manager.wait_for("READY", "1")
        c = s.client()
        t_healthy = time.monotonic()
        time.sleep(0.3)
        assert len(manager.pings(t_healthy)) >= 2
        r = c.acquire("jobs/a", ttl_ms=5000)
        assert r.status == 503, r
        assert c.request("GET", "/readyz").status == 503
        t_sick = time.monotonic()
        # Sample /readyz: for as long as it says the store fails, no ping may come (a ping
        # sent just before the failure may still be on its way: 150 ms of slack).
        last_sick = t_sick
        while time.monotonic() < t_sick + 1.2:
            if c.request("GET", "/readyz").status != 503:
                break
            last_sick = time.monotonic()
            time.sleep(0.05)
        assert last_sick - t_sick >= 0.6, "the store healed too soon to see the pings stop"
        assert manager.pings(t_sick + 0.15, last_sick) == [], manager.pings(t_sick)
        sick = manager.with_field("STATUS", since=t_sick - 0.2)
        assert any(f["STATUS"].startswith("unhealthy") for _, f in sick), sick
        # The disk commits again (the 4th commit): pings resume.
        deadline = time.monotonic() + 10
        while c.request("GET", "/readyz").status != 200:
            assert time.monotonic() < deadline, "the store did not heal"
            time.sleep(0.05)
        t_healed = time.monotonic()
        time.sleep(0.5)
        assert len(manager.pings(t_healed)) >= 2
        assert c.acquire("jobs/a", ttl_ms=5000).status == 200


@pytest.fixture(scope="module")
def azurite():
    from azure import Azurite
    a = Azurite()
    yield a
    a.stop()


def test_ready_waits_for_the_restore_grace(manager, azurite):
    # A server restored from an async mirror grants nothing for --restore-grace-ms: /readyz
    # answers 503 meanwhile, and READY=1 waits for it (the start timeout is extended).
    name = "c" + uuid.uuid4().hex[:20]
    data = tempfile.mkdtemp(prefix="mutexd-notify-restore-")
    mirror = ["--blob-connection-string", azurite.connection_string, "--blob-container", name,
              "--mirror", "async"]
    try:
        with Server(data_dir=data, args=mirror) as s:
            c = s.client()
            assert c.acquire("jobs/a", ttl_ms=60000).status == 200
            deadline = time.monotonic() + 30
            while c.request("GET", "/readyz").json.get("mirror", {}).get("lag_changes") != 0:
                assert time.monotonic() < deadline, "the mirror did not catch up"
                time.sleep(0.1)
            c.close()
        shutil.rmtree(data)  # the disk is lost: the next start restores from the mirror

        with Server(data_dir=data, args=mirror + ["--restore-grace-ms", "2000"],
                    env=manager.env()) as s:
            started = time.monotonic()
            c = s.client()
            r = c.request("GET", "/readyz")
            assert r.status == 503 and "grace" in r.json["reason"], r
            at, ready = manager.wait_for("READY", "1", timeout=15)
            assert c.request("GET", "/readyz").status == 200
            assert at - started >= 1.0, at - started  # the grace, not the start, made it wait
            before = [f for t, f in manager.messages if t < at]
            assert any("EXTEND_TIMEOUT_USEC" in f for f in before), before
            assert any(f.get("STATUS", "").startswith("not ready: restore grace")
                       for f in before), before
            # Healthy all along: the pings did not wait for readiness.
            assert len(manager.pings(0, at)) >= 5
    finally:
        shutil.rmtree(data, ignore_errors=True)
