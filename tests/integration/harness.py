"""Test harness: starts the real mutexd binary on a free loopback port and talks to it
over real HTTP with the standard library only.

MUTEXD_BIN chooses the binary (default: build/mutexd); the ASan run points it at the
sanitizer build. Every server is stopped with SIGTERM and must exit 0 (a sanitizer
report makes it exit non-zero), or killed with SIGKILL when a test says so.
"""

import http.client
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BIN = os.environ.get("MUTEXD_BIN", os.path.join(ROOT, "build", "mutexd"))


# ---- one temporary directory per test process -------------------------------------------

_PARENT = []  # the directory use_own_tmp() made, while it is in use


def use_own_tmp():
    """Points tempfile, and by TMPDIR every process started from now on, at a new directory
    of this process's own under the temporary one: the data directories of the servers a test
    killed, Azurite's, those of a failed test all go there, and remove_own_tmp() removes them
    at the end of the run, whatever happened. Under pytest-xdist each worker has its own."""
    d = tempfile.mkdtemp(prefix="mutexd-pytest-run-")
    _PARENT.append((d, tempfile.tempdir, os.environ.get("TMPDIR")))
    tempfile.tempdir = d
    os.environ["TMPDIR"] = d
    return d


def remove_own_tmp():
    """Removes the directory of use_own_tmp() with all in it, and points tempfile back."""
    while _PARENT:
        d, tempdir, env = _PARENT.pop()
        tempfile.tempdir = tempdir
        if env is None:
            os.environ.pop("TMPDIR", None)
        else:
            os.environ["TMPDIR"] = env
        shutil.rmtree(d, ignore_errors=True)


# Every server started and not yet stopped or killed: a test that fails before it stops
# its servers leaves them here, and the `no_leftover_servers` fixture kills them.
RUNNING = set()


def kill_leftovers():
    """SIGKILL every server a test left running; returns how many there were."""
    left = list(RUNNING)
    for s in left:
        s.kill()
        s._cleanup()
    return len(left)


class Server:
    """One mutexd process. Use as a context manager, or call start() and stop()."""

    def __init__(self, data_dir=None, args=(), env=None, listen="127.0.0.1:0"):
        self.own_dir = data_dir is None
        self.data_dir = data_dir or tempfile.mkdtemp(prefix="mutexd-test-")
        self.args = list(args)
        self.env = dict(os.environ)
        self.env.update(env or {})
        self.listen = listen
        self.proc = None
        self.lines = []
        self.address = None
        self._started = threading.Event()

    def start(self, timeout=15):
        cmd = [BIN, "--listen", self.listen, "--data-dir", self.data_dir] + self.args
        self.proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, stdout=subprocess.PIPE,
                                     env=self.env, text=True, errors="replace")
        RUNNING.add(self)
        threading.Thread(target=self._read, daemon=True).start()
        if not self._started.wait(timeout) or self.address is None:
            rc = self.proc.poll()
            self.kill()
            raise RuntimeError("mutexd did not start (%s):\n%s" % (
                "still running after %ss" % timeout if rc is None else "exit status %s" % rc,
                "\n".join(self.lines)))
        host, port = self.address.rsplit(":", 1)
        self.host, self.port = host.strip("[]"), int(port)
        return self

    def _read(self):
        for line in self.proc.stderr:
            line = line.rstrip("\n")
            self.lines.append(line)
            m = re.search(r'msg="started".* address=(\S+)', line)
            if m:
                self.address = m.group(1)
                self._started.set()
        self._started.set()

    def stop(self, timeout=20):
        """SIGTERM; the server must exit 0 in time."""
        self.terminate()
        self.wait_stopped(timeout)

    def terminate(self):
        """SIGTERM, not waiting: wait_stopped() waits."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)

    def wait_stopped(self, timeout=20):
        """After terminate(): the server must exit 0 in time."""
        if self.proc is None or self.proc.poll() is not None:
            rc = self.proc.returncode if self.proc else 0
        else:
            try:
                rc = self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                RUNNING.discard(self)
                raise AssertionError("mutexd did not stop within %ss:\n%s"
                                     % (timeout, self.log()))
        RUNNING.discard(self)
        self._cleanup()
        assert rc == 0, "mutexd exited %s:\n%s" % (rc, self.log())

    def kill(self):
        """SIGKILL, as a crash."""
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()
        RUNNING.discard(self)
        self.address = None
        self._started.clear()

    def _cleanup(self):
        if self.own_dir:
            shutil.rmtree(self.data_dir, ignore_errors=True)

    def log(self):
        time.sleep(0.05)
        return "\n".join(self.lines[-80:])

    def client(self, timeout=30):
        return Client(self.host, self.port, timeout)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        if exc[0] is None:
            self.stop()
        else:
            self.kill()
            self._cleanup()


class Response:
    def __init__(self, status, headers, body):
        self.status = status
        self.headers = headers
        self.body = body
        try:
            self.json = json.loads(body) if body else None
        except ValueError:
            self.json = None

    def header(self, name):
        return self.headers.get(name.lower())

    @property
    def code(self):
        """The error code, or None."""
        if isinstance(self.json, dict) and isinstance(self.json.get("error"), dict):
            return self.json["error"].get("code")
        return None

    def __repr__(self):
        return "<%s %s>" % (self.status, self.body[:300])


class Client:
    """A keep-alive HTTP/1.1 connection with small helpers for the API."""

    def __init__(self, host, port, timeout=30, retry=True):
        """retry: send again once on a new connection when the server closed an idle
        keep-alive connection. Off where a request must never be sent twice."""
        self.host, self.port, self.timeout, self.retry = host, port, timeout, retry
        self.conn = http.client.HTTPConnection(host, port, timeout=timeout)

    def close(self):
        self.conn.close()

    def request(self, method, path, body=None, headers=None):
        hdrs = dict(headers or {})
        data = None
        if body is not None:
            data = body if isinstance(body, (bytes, str)) else json.dumps(body)
            if isinstance(data, str):
                data = data.encode()
            hdrs.setdefault("Content-Type", "application/json")
        for attempt in range(2):
            try:
                self.conn.request(method, path, body=data, headers=hdrs)
                r = self.conn.getresponse()
                raw = r.read()
                break
            except (ConnectionError, http.client.RemoteDisconnected,
                    http.client.CannotSendRequest, http.client.BadStatusLine):
                # The server may close an idle keep-alive connection: reconnect once.
                self.conn.close()
                self.conn = http.client.HTTPConnection(self.host, self.port,
                                                       timeout=self.timeout)
                if attempt or not self.retry:
                    raise
        headers = {k.lower(): v for k, v in r.getheaders()}
        if r.getheader("Connection", "").lower() == "close":
            self.conn.close()
            self.conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
        return Response(r.status, headers, raw.decode("utf-8", "replace"))

    def post(self, resource, action, body=None, **kw):
        return self.request("POST", "/v1/resources/%s/%s" % (resource, action), body, **kw)

    def acquire(self, resource, owner="tester", **fields):
        fields["owner"] = owner
        return self.post(resource, "acquire", fields)

    def renew(self, resource, lease_id, **fields):
        fields["lease_id"] = lease_id
        return self.post(resource, "renew", fields)

    def release(self, resource, lease_id):
        return self.post(resource, "release", {"lease_id": lease_id})

    def brk(self, resource, **fields):
        return self.post(resource, "break", fields)

    def get(self, resource, query=""):
        return self.request("GET", "/v1/resources/%s%s" % (resource, query))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def recv_to_close(sk):
    """Everything the peer sends on socket sk until it closes."""
    got = b""
    while True:
        b = sk.recv(65536)
        if not b:
            return got
        got += b


def raw_request(host, port, data, timeout=5.0, read_all=True, half_close=False):
    """Sends raw bytes; returns what the server answered (b"" if it closed at once).
    half_close: then shut down our sending side, as a client that has nothing more."""
    with socket.create_connection((host, port), timeout=timeout) as s:
        try:
            s.sendall(data)
            if half_close:
                s.shutdown(socket.SHUT_WR)
        except OSError:
            pass
        chunks = []
        try:
            while True:
                b = s.recv(65536)
                if not b:
                    break
                chunks.append(b)
                if not read_all and b"\r\n\r\n" in b"".join(chunks):
                    break
        except (socket.timeout, ConnectionResetError):
            pass
        return b"".join(chunks)


def status_of(raw):
    """The status code of a raw HTTP response, or None."""
    m = re.match(rb"HTTP/1\.[01] (\d{3})", raw)
    return int(m.group(1)) if m else None
