#!/usr/bin/python3
"""bench/idle_conns.py: what idle keep-alive connections cost a running mutexd.

Opens --connections keep-alive TCP connections to the server (at most --window of them
connecting or waiting for their answer at a time, well inside the listen backlog), sends
`GET /healthz` on each and reads its whole 200 answer, then keeps them all open and idle.
The server's resident memory (VmRSS in /proc/PID/status) is read before the first and
after the last has been answered: (after - before) / connections is the memory an idle
connection costs the server process (the kernel's socket buffers are not in it). While
they are held, --requests fresh `GET /healthz` round trips on one more connection measure
a request's latency (as many on it before the others are opened, for comparison); after
--idle-s seconds of idle, a sample of the held connections (--sample, spread over the
order they were opened in) must answer a second request, and none may have been closed by
the server meanwhile. Everything is closed at the end. Beside them: the descriptors the
server has open while they are held (/proc/PID/fd) and the connections it says it closed
for idling or to make room (/metrics).

Prints one JSON object on stdout:
{"connections", "opened", "answered", "errors", "open_s", "rss_before_kib", "rss_after_kib",
 "rss_idle_kib", "kib_per_conn", "server_fds", "server_reaped",
 "request": {"count", "p50_ms", "p99_ms", "max_ms", "error"}, "request_alone": {the same},
 "idle_s", "closed_while_idle", "sample", "sample_answered", "ok"}
and one line for people on stderr. Exit status 1 if fewer than --connections were opened
and answered, or the held ones did not all stay open and answer again; 2 if a limit of
open files (this process's or the server's) is too low to try.

The server needs room for them: --max-connections at least 1.25 x the connections (past 90%
of its limit it closes the connections idle longest), --idle-timeout-ms longer than the run,
and a hard limit of open files above the connections (it raises its soft limit to it).
This process raises its own soft limit as far as needed.

    bench/idle_conns.py --port 8080 --pid PID [--connections 10000] [--requests 200]
"""

import argparse
import errno
import json
import os
import resource
import selectors
import socket
import sys
import time

HOST = "127.0.0.1"
REQUEST = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
CONNECTING, READING, IDLE, FAILED = range(4)


class Conn:
    __slots__ = ("sock", "state", "buf", "t0")

    def __init__(self, sock, t0):
        self.sock, self.state, self.buf, self.t0 = sock, CONNECTING, b"", t0


def die(code, msg):
    print("idle_conns.py: " + msg, file=sys.stderr)
    sys.exit(code)


def parse(buf):
    """(status, closes, length of the whole answer) once its headers are in, else None."""
    end = buf.find(b"\r\n\r\n")
    if end < 0:
        return None
    lines = buf[:end].split(b"\r\n")
    try:
        status = int(lines[0].split()[1])
    except (IndexError, ValueError):
        raise ValueError("not an HTTP answer") from None
    length, closes = None, False
    for line in lines[1:]:
        k, _, v = line.partition(b":")
        k = k.strip().lower()
        if k == b"content-length":
            length = int(v)
        elif k == b"connection" and b"close" in v.lower():
            closes = True
    if length is None:
        raise ValueError("an answer without Content-Length")
    return status, closes, end + 4 + length


def rss_kib(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS for pid %d" % pid)


def nofile_limit(pid):
    """The soft limit of open files of a process, None when unlimited."""
    with open("/proc/%d/limits" % pid) as f:
        for line in f:
            if line.startswith("Max open files"):
                v = line.split()[3]
                return None if v == "unlimited" else int(v)
    return None


def raise_nofile(need):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft >= need:
        return
    if hard != resource.RLIM_INFINITY and hard < need:
        try:  # only a privileged process may raise its hard limit
            resource.setrlimit(resource.RLIMIT_NOFILE, (need, need))
            return
        except (ValueError, OSError):
            die(2, "this process may open %d files at most (hard limit) and needs %d: raise "
                "it (ulimit -Hn) or ask for fewer --connections" % (hard, need))
    resource.setrlimit(resource.RLIMIT_NOFILE, (need, hard))


def pct(xs, p):
    xs = sorted(xs)
    return round(xs[min(len(xs) - 1, int(p / 100.0 * len(xs)))], 3) if xs else None


class Pool:
    """The held connections and one selector for all of them."""

    def __init__(self, port):
        self.port = port
        self.sel = selectors.DefaultSelector()
        self.conns = []
        self.busy = set()  # connecting, or waiting for an answer
        self.errors = {}
        self.connected = 0

    def fail(self, c, why):
        self.errors[why] = self.errors.get(why, 0) + 1
        self.busy.discard(c)
        if c.state != FAILED:
            self.sel.unregister(c.sock)
            c.sock.close()
        c.state = FAILED

    def open_one(self):
        try:
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        except OSError as e:
            self.errors[errno.errorcode.get(e.errno, str(e.errno))] = 1
            return False
        s.setblocking(False)
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        c = Conn(s, time.monotonic())
        self.conns.append(c)
        self.busy.add(c)
        self.sel.register(s, selectors.EVENT_WRITE, c)
        rc = s.connect_ex((HOST, self.port))
        if rc not in (0, errno.EINPROGRESS):
            self.fail(c, errno.errorcode.get(rc, str(rc)))
        return True

    def ask(self, c):
        """Sends the request on a connection that is connected and idle."""
        c.buf, c.t0, c.state = b"", time.monotonic(), READING
        self.busy.add(c)
        try:
            if c.sock.send(REQUEST) != len(REQUEST):
                self.fail(c, "short send")
        except OSError as e:
            self.fail(c, errno.errorcode.get(e.errno, str(e.errno)))

    def event(self, c):
        if c.state == CONNECTING:
            err = c.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
            if err:
                self.fail(c, errno.errorcode.get(err, str(err)))
                return
            self.connected += 1
            self.sel.modify(c.sock, selectors.EVENT_READ, c)
            self.ask(c)
            return
        try:
            data = c.sock.recv(65536)
        except BlockingIOError:
            return
        except OSError as e:
            self.fail(c, errno.errorcode.get(e.errno, str(e.errno)))
            return
        if c.state == IDLE:  # an idle connection hears only of its end
            self.fail(c, "closed while idle" if not data else "data while idle")
            return
        if not data:
            self.fail(c, "closed before the answer")
            return
        c.buf += data
        try:
            head = parse(c.buf)
        except ValueError as e:
            self.fail(c, str(e))
            return
        if head is None or len(c.buf) < head[2]:
            return
        status, closes, _ = head
        if status != 200:
            self.fail(c, "status %d" % status)
        elif closes:
            self.fail(c, "Connection: close")
        else:
            c.state = IDLE
            self.busy.discard(c)

    def pump(self, timeout_s, conn_timeout_s, more=None):
        """Handles events until nothing is busy and `more` (called to start connections)
        has nothing left to start, or timeout_s has passed."""
        end = time.monotonic() + timeout_s
        while True:
            if more:
                more()
            if not self.busy:
                return
            now = time.monotonic()
            if now >= end:
                for c in list(self.busy):
                    self.fail(c, "timeout")
                return
            for key, _ in self.sel.select(timeout=min(0.2, end - now)):
                self.event(key.data)
            now = time.monotonic()
            for c in [c for c in self.busy if now - c.t0 > conn_timeout_s]:
                self.fail(c, "timeout")

    def idle(self):
        return [c for c in self.conns if c.state == IDLE]


def probe_get(sock, path):
    """One request on a blocking socket: (status, body)."""
    sock.sendall(("GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n" % path).encode())
    buf = b""
    while True:
        data = sock.recv(65536)
        if not data:
            raise ConnectionError("the server closed the probe connection")
        buf += data
        head = parse(buf)
        if head and len(buf) >= head[2]:
            end = buf.find(b"\r\n\r\n") + 4
            return head[0], buf[end:head[2]]


def round_trips(sock, count):
    """count GET /healthz one after the other: (milliseconds of each, error or None)."""
    lat = []
    try:
        for _ in range(count):
            s = time.perf_counter()
            status, _ = probe_get(sock, "/healthz")
            lat.append((time.perf_counter() - s) * 1000.0)
            if status != 200:
                return lat, "status %d" % status
    except (OSError, ValueError) as e:
        return lat, str(e)
    return lat, None


def summary(lat, error):
    return {"count": len(lat), "p50_ms": pct(lat, 50), "p99_ms": pct(lat, 99),
            "max_ms": round(max(lat), 3) if lat else None, "error": error}


def open_fds(pid):
    try:
        return len(os.listdir("/proc/%d/fd" % pid))
    except OSError:
        return None


def server_reaped(sock):
    """The connections the server has closed for idling or to make room, from /metrics."""
    try:
        status, body = probe_get(sock, "/metrics")
    except (OSError, ValueError):
        return None
    if status != 200:
        return None
    vals = {}
    for line in body.decode("utf-8", "replace").splitlines():
        parts = line.split()
        if len(parts) == 2 and not line.startswith("#"):
            vals[parts[0]] = parts[1]
    v = vals.get("mutexd_http_connections_reaped_total")
    return int(float(v)) if v is not None else None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--port", type=int, required=True, help="the server's port on 127.0.0.1")
    ap.add_argument("--pid", type=int, required=True, help="the server's process id")
    ap.add_argument("--connections", type=int, default=10000)
    ap.add_argument("--window", type=int, default=256,
                    help="connections connecting or waiting for their answer at once")
    ap.add_argument("--requests", type=int, default=200,
                    help="round trips on one more connection while they are held")
    ap.add_argument("--idle-s", type=float, default=2.0)
    ap.add_argument("--sample", type=int, default=500,
                    help="held connections asked again after the idle")
    ap.add_argument("--timeout-s", type=float, default=10.0,
                    help="longest wait for one connection's connect and answer")
    a = ap.parse_args()
    n = a.connections
    if n < 1 or a.window < 1 or a.requests < 1:
        die(2, "--connections, --window and --requests must be at least 1")
    if not os.path.exists("/proc/%d/status" % a.pid):
        die(2, "no process %d" % a.pid)
    raise_nofile(n + 64)
    server_limit = nofile_limit(a.pid)
    if server_limit is not None and server_limit < n + 32:
        die(2, "the server (pid %d) may open %d files at most and cannot hold %d connections: "
            "start it with a higher limit of open files (ulimit -n)" % (a.pid, server_limit, n))

    # The extra connection: the round trips before the others are opened (whatever a first
    # request allocates is then not counted against the idle ones), and while they are held.
    try:
        probe = socket.create_connection((HOST, a.port), timeout=a.timeout_s)
        probe.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    except OSError as e:
        die(1, "cannot connect to 127.0.0.1:%d: %s" % (a.port, e))
    lat_alone, error = round_trips(probe, a.requests)
    if error:
        die(1, "GET /healthz on 127.0.0.1:%d: %s" % (a.port, error))
    time.sleep(0.2)
    rss_before = rss_kib(a.pid)

    pool = Pool(a.port)
    started = [0]

    def more():
        while started[0] < n and len(pool.busy) < a.window:
            if not pool.open_one():
                started[0] = n  # out of descriptors: nothing more can be opened
                return
            started[0] += 1

    t0 = time.monotonic()
    pool.pump(max(60.0, n / 100.0), a.timeout_s, more)
    open_s = time.monotonic() - t0
    opened = pool.connected
    answered = len(pool.idle())
    rss_after = rss_kib(a.pid)
    server_fds = open_fds(a.pid)
    held_since = time.monotonic()

    # A request while they are held: fresh round trips on the extra connection.
    lat, probe_error = round_trips(probe, a.requests)
    reaped = server_reaped(probe) if not probe_error else None

    # Idle, then: has the server closed any, and do they answer again?
    time.sleep(max(0.0, a.idle_s - (time.monotonic() - held_since)))
    before_idle_check = len(pool.idle())
    for key, _ in pool.sel.select(timeout=0):
        pool.event(key.data)
    closed_while_idle = before_idle_check - len(pool.idle())
    rss_idle = rss_kib(a.pid)
    held = pool.idle()
    step = max(1, len(held) // max(1, a.sample))
    sample = held[::step][:a.sample]
    for c in sample:
        pool.ask(c)
    pool.pump(a.timeout_s, a.timeout_s)
    sample_answered = sum(1 for c in sample if c.state == IDLE)

    for c in pool.conns:
        if c.state != FAILED:
            pool.sel.unregister(c.sock)
            c.sock.close()
    pool.sel.close()
    probe.close()

    ok = (answered == n and not probe_error and closed_while_idle == 0
          and sample_answered == len(sample) and len(sample) > 0)
    out = {
        "connections": n, "opened": opened, "answered": answered, "errors": pool.errors,
        "open_s": round(open_s, 3), "rss_before_kib": rss_before, "rss_after_kib": rss_after,
        "rss_idle_kib": rss_idle,
        "kib_per_conn": round((rss_after - rss_before) / answered, 2) if answered else None,
        "server_fds": server_fds, "server_reaped": reaped,
        "request": summary(lat, probe_error), "request_alone": summary(lat_alone, None),
        "idle_s": a.idle_s, "closed_while_idle": closed_while_idle, "sample": len(sample),
        "sample_answered": sample_answered, "ok": ok,
    }
    print(json.dumps(out))
    r = out["request"]
    print("%d/%d connections opened and answered in %.2f s; server RSS %.1f -> %.1f MiB: "
          "%s KiB per idle connection; a request while they are held: p50 %s ms, p99 %s ms "
          "(before: %s, %s); after %g s idle %d/%d of a sample answered again, %d closed"
          % (answered, n, open_s, rss_before / 1024.0, rss_after / 1024.0, out["kib_per_conn"],
             r["p50_ms"] if lat else "-", r["p99_ms"] if lat else "-",
             out["request_alone"]["p50_ms"], out["request_alone"]["p99_ms"], a.idle_s,
             sample_answered, len(sample), closed_while_idle), file=sys.stderr)
    if answered < n:
        die(1, "only %d of %d connections were opened and answered (errors: %s); the server "
            "needs --max-connections of at least 1.25 x that, and open files to match"
            % (answered, n, ", ".join("%s %d" % kv for kv in sorted(pool.errors.items()))
               or "none"))
    if not ok:
        die(1, "the held connections did not all stay open and answer again (%d closed while "
            "idle, %d/%d of the sample answered%s)"
            % (closed_while_idle, sample_answered, len(sample),
               "; the probe: " + probe_error if probe_error else ""))


if __name__ == "__main__":
    main()
