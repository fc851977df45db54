"""The leader-election workers of clients/examples (Python, Node.js, and the shell script on
mutexctl run) under faults:

- a leader paused with SIGSTOP past its lease's TTL, while another takes the lease, performs
  no leader action after it is resumed: it checks the lease's deadline on its clock before
  each action, instead of trusting what its renewals last saw;
- a server restart (SIGTERM or SIGKILL, data kept, same port) shorter than half the TTL does
  not cost the leader its lease: it keeps leading with the same fencing token. During the
  outage the server's address goes dark, as a stopped container's does: connections open
  then, and those opened during it, get no answer ever (a proxy holds them), so only a
  client that bounds each request's time and connects afresh keeps its lease;
- SIGTERM or SIGKILL of the PID the shell worker prints ends its leadership: the lease is
  released (or runs out) and no mutexctl of it survives.
"""

import os
import signal
import socket
import threading
import time

import pytest

from harness import ROOT, Server, free_port
from test_examples import Worker, go_leader, mutexctl

pytestmark = pytest.mark.examples

KINDS = {
    "python": ["/usr/bin/python3", "-u", os.path.join(ROOT, "clients/examples/python/leader.py")],
    "node": ["node", os.path.join(ROOT, "clients/examples/node/leader.mjs")],
    "go": ["GO_LEADER"],  # built when first used: go_leader()
    "shell": ["bash", os.path.join(ROOT, "clients/examples/shell/leader.sh")],
}


def command(kind):
    return [go_leader()] if kind == "go" else KINDS[kind]


def worker_env(url, resource, ttl_ms, retry_s=0.5):
    ctl = mutexctl()
    assert ctl, "mutexctl is not built"
    return dict(os.environ, MUTEXD_URL=url, MUTEXD_RESOURCE=resource, MUTEXD_TTL_MS=str(ttl_ms),
                MUTEXD_RETRY_S=str(retry_s), MUTEXCTL=ctl,
                PYTHONPATH=os.path.join(ROOT, "clients", "python"))


def wait_until(cond, timeout, what):
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def session_pids(sid):
    """Every process of session `sid` (a worker and all it started)."""
    pids = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % d) as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[3]) == sid:  # after the state: ppid, pgrp, session
            pids.append(int(d))
    return pids


def signal_session(sid, sig):
    for pid in session_pids(sid):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


def resume_work_first(sid):
    """SIGCONT to the session, the leader's work first and its supervisors (the worker, and
    mutexctl) 0.3 s later: after a pause nothing says which runs first, and this is the order
    in which a check made only by the supervisor comes too late."""
    ctl = mutexctl().encode()
    work, supervisors = [], []
    for pid in session_pids(sid):
        try:
            with open("/proc/%d/cmdline" % pid, "rb") as f:
                argv0 = f.read().split(b"\0")[0]
        except OSError:
            continue
        (supervisors if pid == sid or argv0 == ctl else work).append(pid)
    for group in (work, supervisors):
        if group is supervisors and work:
            time.sleep(0.3)
        for pid in group:
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass


def stop_worker(w):
    if w.proc.poll() is None:
        signal_session(w.proc.pid, signal.SIGCONT)
        signal_session(w.proc.pid, signal.SIGKILL)
        w.proc.wait()


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_a_leader_paused_past_its_ttl_acts_no_more_when_resumed(kind):
    ttl_ms = 2000
    resource = "faults/pause-" + kind
    with Server(args=["--min-ttl-ms", "500"]) as s:
        env = worker_env("http://%s:%d" % (s.host, s.port), resource, ttl_ms)
        w = Worker(kind, command(kind), env)
        try:
            wait_until(lambda: len(w.lead_times) >= 2, 15, ("no leader", w.other))
            token = w.tokens[-1]
            # Paused right after a leader line: its next action is due in a second.
            n = len(w.lead_times)
            wait_until(lambda: len(w.lead_times) > n, 5, "the leader stopped beating")
            signal_session(w.proc.pid, signal.SIGSTOP)
            paused = time.monotonic()
            # Another takes the lease once the paused one's has run out.
            c = s.client()
            r = c.acquire(resource, owner="another", ttl_ms=30000, wait_ms=10000)
            assert r.status == 200, r.body
            assert int(r.json["fencing_token"]) > token
            time.sleep(max(0.0, paused + ttl_ms / 1000 + 0.5 - time.monotonic()))
            resumed = time.monotonic()
            resume_work_first(w.proc.pid)
            time.sleep(3)
            late = [x - resumed for x in w.lead_times if x >= resumed]
            assert not late, "%s leader: %d leader line(s) after it was resumed, at %s s" % (
                kind, len(late), ["%.2f" % x for x in late])
            assert c.get(resource).json["holder"]["owner"] == "another"
            c.close()
        finally:
            stop_worker(w)


class DarkProxy:
    """A TCP proxy in front of the server that can go dark: then every connection open, and
    every one made while dark, stays open and gets no answer, ever; after it is lit again,
    new connections reach the server."""

    def __init__(self, target_port):
        self.target = ("127.0.0.1", target_port)
        self.lsock = socket.socket()
        self.lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.lsock.bind(("127.0.0.1", 0))
        self.lsock.listen(64)
        self.port = self.lsock.getsockname()[1]
        self.dark = False
        self.pairs = []  # [client socket, server socket or None, {"frozen": bool}]
        self.lock = threading.Lock()
        self.closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while not self.closed:
            try:
                csock, _ = self.lsock.accept()
            except OSError:
                return
            with self.lock:
                if self.dark:
                    self.pairs.append([csock, None, {"frozen": True}])
                    continue
            try:
                ssock = socket.create_connection(self.target, timeout=2)
                ssock.settimeout(None)
            except OSError:
                csock.close()
                continue
            state = {"frozen": False}
            with self.lock:
                self.pairs.append([csock, ssock, state])
            for a, b in ((csock, ssock), (ssock, csock)):
                threading.Thread(target=self._pump, args=(a, b, state), daemon=True).start()

    def _pump(self, src, dst, state):
        while True:
            try:
                data = src.recv(65536)
            except OSError:
                data = b""
            if state["frozen"]:
                return  # hold both ends open, forward nothing
            if not data:
                for sock in (src, dst):
                    try:
                        sock.shutdown(socket.SHUT_RDWR)
                    except OSError:
                        pass
                return
            try:
                dst.sendall(data)
            except OSError:
                return

    def go_dark(self):
        with self.lock:
            self.dark = True
            for pair in self.pairs:
                pair[2]["frozen"] = True

    def light(self):
        with self.lock:
            self.dark = False

    def close(self):
        self.closed = True
        self.lsock.close()
        with self.lock:
            for csock, ssock, _ in self.pairs:
                for sock in (csock, ssock):
                    if sock is not None:
                        sock.close()


@pytest.mark.parametrize("sig", ["SIGTERM", "SIGKILL"])
@pytest.mark.parametrize("kind", sorted(KINDS))
def test_a_short_server_restart_keeps_the_lease(kind, sig, tmp_path):
    ttl_ms = 5000
    resource = "faults/restart-" + kind
    port = free_port()
    data_dir = str(tmp_path / "data")
    os.mkdir(data_dir)
    listen = "127.0.0.1:%d" % port
    s = Server(data_dir=data_dir, args=["--min-ttl-ms", "500"], listen=listen).start()
    proxy = DarkProxy(port)
    w = None
    try:
        env = worker_env("http://127.0.0.1:%d" % proxy.port, resource, ttl_ms)
        w = Worker(kind, command(kind), env)
        wait_until(lambda: len(w.lead_times) >= 2, 15, ("no leader", w.other))
        token = w.tokens[-1]
        c = s.client()
        assert int(c.get(resource).json["holder"]["fencing_token"]) == token
        c.close()
        time.sleep(0.7)  # somewhere in the renewal cycle

        # The outage: the address goes dark, the server restarts on the same port with the
        # same data; 1.5 s later (less than TTL/2, even for a slow sanitizer build's
        # restart) the address answers again.
        down = time.monotonic()
        proxy.go_dark()
        if sig == "SIGTERM":
            s.stop()
        else:
            s.kill()
        s = Server(data_dir=data_dir, args=["--min-ttl-ms", "500"], listen=listen)
        s.start()
        time.sleep(max(0.0, down + 1.5 - time.monotonic()))
        proxy.light()
        up = time.monotonic()
        assert up - down < ttl_ms / 2000, "the outage lasted %.2f s" % (up - down)

        # Over one and a half TTLs after it, the worker leads throughout, with the same token.
        time.sleep(1.5 * ttl_ms / 1000)
        c = s.client()
        holder = c.get(resource).json.get("holder") or {}
        c.close()
        assert int(holder.get("fencing_token", 0)) == token, (holder, token, w.other)
        after = [t for x, t in zip(w.lead_times, w.tokens) if x > up + 1]
        assert len(after) >= 4, ("the worker stopped leading", w.other)
        assert set(after) == {token}, (after, token)
        lost = [line for line in w.other if "lost" in line]
        assert not lost, lost
    finally:
        if w is not None:
            stop_worker(w)
        proxy.close()
        s.kill()
        s._cleanup()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["SIGTERM", "SIGKILL"])
def test_killing_the_pid_the_shell_worker_prints_ends_its_leadership(sig):
    ttl_ms = 3000
    resource = "faults/kill-printed-pid"
    ctl = mutexctl()
    with Server(args=["--min-ttl-ms", "500"]) as s:
        env = worker_env("http://%s:%d" % (s.host, s.port), resource, ttl_ms)
        w = Worker("shell", KINDS["shell"], env)
        try:
            wait_until(lambda: w.lead_times, 15, ("no leader", w.other))
            assert len(w.pids) == 1, w.pids
            printed = w.pids.pop()
            os.kill(printed, sig)
            killed = time.monotonic()
            c = s.client()
            wait_until(lambda: c.get(resource).json["state"] == "free", ttl_ms / 1000 + 2,
                       "the lease is still held %.1f s after %s of the printed PID"
                       % (time.monotonic() - killed, sig.name))
            took = time.monotonic() - killed
            c.close()
            print("%s of the printed PID: free after %.2f s" % (sig.name, took))
            time.sleep(0.5)
            left = []
            for d in os.listdir("/proc"):
                if not d.isdigit():
                    continue
                try:
                    with open("/proc/%s/cmdline" % d, "rb") as f:
                        argv = f.read().split(b"\0")
                except OSError:
                    continue
                if argv and argv[0] == ctl.encode() and resource.encode() in argv:
                    left.append(int(d))
            assert not left, "mutexctl of the killed worker still runs: %s" % left
            n = len(w.lead_times)
            time.sleep(1.5)
            assert len(w.lead_times) == n, "leader lines after the worker was killed"
        finally:
            stop_worker(w)
