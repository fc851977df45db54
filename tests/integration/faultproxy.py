"""A fault-injecting HTTP/1.1 proxy in front of Azurite, for the server group's fault
tests (test_ha_faults.py, ha_nemesis.py). Standard library only; it runs in threads of the
test process, on 127.0.0.1 and a free port.

Each server of a group gets its own proxy (its own connection string, `connection_string`),
so a fault can target one server. A test adds rules at run time:

    p = FaultProxy(azurite)
    r = p.add(method="PUT", path=r"/journal/", header=("x-ms-blob-type", "AppendBlob"),
              action="503")              # the next matching request is answered 503
    ...
    assert r.fired == 1                  # the fault really happened
    p.remove(r)

A rule matches on the method, a regex searched in the path (/account/container/blob), an
optional regex searched in the query string (e.g. `comp=metadata`) and an optional header
(name, regex). It fires on its `nth` match and the `times - 1` matches after it (times=None:
every match from the nth on). Actions:

  * "503": a well-formed Azure error answer (ServerBusy), the request is not forwarded;
  * "reset": the connection is reset (RST), the request is not forwarded;
  * "delay": forwarded after `delay` seconds;
  * "blackhole": never answered nor forwarded; the connection is held until the rule is
    removed (or the proxy closed), then closed;
  * "hold": held until the rule is removed, then forwarded (a link that stalls and recovers).

`cut()` holds every request and every answer in flight (a partition) until `heal()`; held
requests are then dropped with their connection, as a client that gave up would see.

Keep-alive towards the server is kept (its libcurl reuses connections); each forwarded
request goes to Azurite on a fresh connection, read whole (Content-Length, chunked or to the
close), and relayed with a Content-Length. Bodies of any size."""

import re
import socket
import threading
import time

ERROR_BODY = ('<?xml version="1.0" encoding="utf-8"?><Error><Code>%s</Code><Message>%s\n'
              'RequestId:00000000-0000-0000-0000-000000000000\nTime:%s</Message></Error>')


class Rule:
    def __init__(self, method=None, path=None, query=None, header=None, action="503", nth=1,
                 times=1, delay=0.0, status=503, code="ServerBusy"):
        assert action in ("503", "reset", "delay", "blackhole", "hold"), action
        self.method = method
        self.path = re.compile(path) if path else None
        self.query = re.compile(query) if query else None
        self.header = (header[0].lower(), re.compile(header[1])) if header else None
        self.action = action
        self.nth = nth
        self.times = times
        self.delay = delay
        self.status = status
        self.code = code
        self.matched = 0  # matching requests seen
        self.fired = 0  # of those, the ones the fault was applied to
        self.hits = []  # (time, method, target) of each fired request
        self.released = threading.Event()

    def matches(self, method, path, query, headers):
        if self.method and method != self.method:
            return False
        if self.path and not self.path.search(path):
            return False
        if self.query and not self.query.search(query):
            return False
        if self.header:
            v = headers.get(self.header[0])
            if v is None or not self.header[1].search(v):
                return False
        return True

    def __repr__(self):
        return "<Rule %s %s %s %s nth=%s times=%s matched=%d fired=%d>" % (
            self.action, self.method, self.path and self.path.pattern,
            self.query and self.query.pattern, self.nth, self.times, self.matched, self.fired)


class Request:
    def __init__(self, method, target, version, headers, raw_headers, body):
        self.method = method
        self.target = target
        self.version = version
        self.headers = headers  # lower-case name -> value
        self.raw_headers = raw_headers  # [(name, value)] as sent
        self.body = body
        self.path, _, self.query = target.partition("?")


def _read_line(f, limit=65536):
    line = f.readline(limit + 1)
    if len(line) > limit:
        raise ValueError("line too long")
    return line


def _read_headers(f):
    raw = []
    while True:
        line = _read_line(f)
        if not line:
            raise EOFError
        if line in (b"\r\n", b"\n"):
            return raw
        name, _, value = line.decode("latin-1").partition(":")
        raw.append((name.strip(), value.strip()))


def _read_chunked(f):
    body = bytearray()
    while True:
        size = int(_read_line(f).split(b";")[0].strip(), 16)
        if size == 0:
            while _read_line(f) not in (b"\r\n", b"\n", b""):
                pass  # trailers
            return bytes(body)
        body += f.read(size)
        f.read(2)


def _dechunk(data):
    body, pos = bytearray(), 0
    while True:
        end = data.index(b"\r\n", pos)
        size = int(data[pos:end].split(b";")[0].strip(), 16)
        pos = end + 2
        if size == 0:
            return bytes(body)
        body += data[pos:pos + size]
        pos += size + 2


class FaultProxy:
    def __init__(self, azurite, upstream_timeout=120.0):
        self.az = azurite
        self.upstream = ("127.0.0.1", azurite.port)
        self.upstream_timeout = upstream_timeout
        self.lock = threading.Lock()
        self.rules = []
        self.requests = 0
        self.log = []  # (time, method, target, status or action), the last 5000
        # Every PUT forwarded or failed: (time, blob, query, status, body, journal named by
        # an owner metadata write), for the checker to find where a change was written.
        self.writes = []
        self.closed = False
        self.healed = threading.Event()
        self.healed.set()
        self.conns = set()
        self.lsock = socket.socket()
        self.lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.lsock.bind(("127.0.0.1", 0))
        self.lsock.listen(256)
        self.port = self.lsock.getsockname()[1]
        self.connection_string = azurite.connection_string.replace(
            "127.0.0.1:%d/" % azurite.port, "127.0.0.1:%d/" % self.port)
        assert self.connection_string != azurite.connection_string
        threading.Thread(target=self._accept, daemon=True, name="faultproxy").start()

    # ---- rules ----------------------------------------------------------------------

    def add(self, **kw):
        r = Rule(**kw)
        with self.lock:
            self.rules.append(r)
        return r

    def remove(self, rule):
        with self.lock:
            if rule in self.rules:
                self.rules.remove(rule)
        rule.released.set()

    def clear(self):
        with self.lock:
            rules, self.rules = self.rules, []
        for r in rules:
            r.released.set()

    def cut(self):
        """Nothing passes either way until heal()."""
        self.healed.clear()

    def heal(self):
        self.healed.set()

    def wait_fired(self, rule, n=1, timeout=30):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if rule.fired >= n:
                return True
            time.sleep(0.02)
        return False

    def close(self):
        self.closed = True
        self.clear()
        self.healed.set()
        try:
            self.lsock.close()
        except OSError:
            pass
        with self.lock:
            conns = list(self.conns)
        for c in conns:
            try:
                c.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            try:
                c.close()
            except OSError:
                pass

    # ---- serving --------------------------------------------------------------------

    def _accept(self):
        while not self.closed:
            try:
                c, _ = self.lsock.accept()
            except OSError:
                return
            c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self.lock:
                self.conns.add(c)
            threading.Thread(target=self._serve, args=(c,), daemon=True).start()

    def _match(self, req):
        with self.lock:
            self.requests += 1
            for r in self.rules:
                if r.matches(req.method, req.path, req.query, req.headers):
                    r.matched += 1
                    if r.matched >= r.nth and (r.times is None or r.fired < r.times):
                        r.fired += 1
                        r.hits.append((time.monotonic(), req.method, req.target))
                        return r
        return None

    def _note(self, req, what):
        with self.lock:
            self.log.append((time.monotonic(), req.method, req.target, what))
            if len(self.log) > 5000:
                del self.log[:1000]

    def _record(self, req, status):
        if req.method != "PUT":
            return
        parts = req.path.split("/", 3)  # "", account, container, blob
        blob = parts[3] if len(parts) > 3 else ""
        with self.lock:
            self.writes.append((time.monotonic(), blob, req.query, status, req.body,
                                req.headers.get("x-ms-meta-journal")))

    def _hold(self, event):
        while not self.closed and not event.wait(0.05):
            pass

    def _serve(self, c):
        f = c.makefile("rb")
        try:
            while not self.closed:
                line = _read_line(f)
                if not line:
                    return
                if line in (b"\r\n", b"\n"):
                    continue
                method, target, version = line.decode("latin-1").rstrip("\r\n").split(" ", 2)
                raw = _read_headers(f)
                headers = {k.lower(): v for k, v in raw}
                if "chunked" in headers.get("transfer-encoding", "").lower():
                    body = _read_chunked(f)
                else:
                    n = int(headers.get("content-length", "0") or 0)
                    body = f.read(n) if n else b""
                    if len(body) < n:
                        return
                req = Request(method, target, version, headers, raw, body)
                if not self.healed.is_set():
                    self._note(req, "cut")
                    self._hold(self.healed)
                    return  # the client has given up on it; drop the connection
                rule = self._match(req)
                if rule is not None:
                    self._note(req, rule.action)
                    if rule.action in ("503", "reset", "blackhole"):
                        self._record(req, rule.action)
                    if rule.action == "503":
                        self._answer_error(c, rule)
                        continue
                    if rule.action == "reset":
                        c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\0\0\0\0\0\0\0")
                        return
                    if rule.action == "blackhole":
                        self._hold(rule.released)
                        return
                    if rule.action == "hold":
                        self._hold(rule.released)
                    if rule.action == "delay":
                        time.sleep(rule.delay)
                answer = self._forward(req)
                if answer is None:
                    return
                if not self.healed.is_set():
                    self._note(req, "cut")
                    self._hold(self.healed)
                    return
                c.sendall(answer)
                if headers.get("connection", "").lower() == "close":
                    return
        except (OSError, ValueError, EOFError):
            return
        finally:
            with self.lock:
                self.conns.discard(c)
            try:
                f.close()
                c.close()
            except OSError:
                pass

    def _answer_error(self, c, rule):
        now = time.strftime("%Y-%m-%dT%H:%M:%S.0000000Z", time.gmtime())
        body = (ERROR_BODY % (rule.code, "The server is busy (injected by the test).",
                              now)).encode()
        head = ("HTTP/1.1 %d Service Unavailable\r\nContent-Type: application/xml\r\n"
                "x-ms-error-code: %s\r\nx-ms-request-id: 00000000-0000-0000-0000-000000000000\r\n"
                "x-ms-version: 2021-08-06\r\nDate: %s\r\nContent-Length: %d\r\n"
                "Connection: keep-alive\r\n\r\n" % (
                    rule.status, rule.code,
                    time.strftime("%a, %d %b %Y %H:%M:%S GMT", time.gmtime()), len(body)))
        c.sendall(head.encode() + body)

    def _forward(self, req):
        """Azurite's answer, re-framed for keep-alive, or None (it did not answer)."""
        try:
            u = socket.create_connection(self.upstream, timeout=self.upstream_timeout)
        except OSError:
            return None
        try:
            head = ["%s %s %s" % (req.method, req.target, req.version)]
            for k, v in req.raw_headers:
                if k.lower() in ("connection", "keep-alive", "transfer-encoding",
                                 "content-length", "proxy-connection"):
                    continue
                head.append("%s: %s" % (k, v))
            if req.body or req.method in ("PUT", "POST"):
                head.append("Content-Length: %d" % len(req.body))
            head.append("Connection: close")
            u.sendall(("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + req.body)
            chunks = []
            while True:
                b = u.recv(1 << 20)
                if not b:
                    break
                chunks.append(b)
            data = b"".join(chunks)
        except OSError:
            return None
        finally:
            u.close()
        end = data.find(b"\r\n\r\n")
        if end < 0:
            return None
        lines = data[:end].decode("latin-1").split("\r\n")
        status = int(lines[0].split(" ", 2)[1])
        hdrs = []
        for l in lines[1:]:
            k, _, v = l.partition(":")
            hdrs.append((k.strip(), v.strip()))
        rest = data[end + 4:]
        low = {k.lower(): v for k, v in hdrs}
        self._note(req, status)
        self._record(req, status)
        if req.method == "HEAD" or status in (204, 304) or 100 <= status < 200:
            body = b""
            keep = [(k, v) for k, v in hdrs if k.lower() not in ("connection", "keep-alive")]
        else:
            if "chunked" in low.get("transfer-encoding", "").lower():
                body = _dechunk(rest)
            elif "content-length" in low:
                body = rest[:int(low["content-length"])]
            else:
                body = rest
            keep = [(k, v) for k, v in hdrs if k.lower() not in (
                "connection", "keep-alive", "transfer-encoding", "content-length")]
            keep.append(("Content-Length", str(len(body))))
        keep.append(("Connection", "keep-alive"))
        out = lines[0] + "\r\n" + "".join("%s: %s\r\n" % kv for kv in keep) + "\r\n"
        return out.encode("latin-1") + body
