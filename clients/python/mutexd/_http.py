"""HTTP/1.1 keep-alive transport with a small, thread-safe pool of connections."""

from __future__ import annotations

import http.client
import json
import socket
import ssl
import threading
import time
import urllib.parse
from typing import Any, Optional, Union

from ._errors import ProtocolError, Timeout, TransportError, error_class

__all__ = ["Transport", "Response"]

_Connection = Union[http.client.HTTPConnection, http.client.HTTPSConnection]

# Errors that mean "the server closed this kept-alive connection before reading the
# request": sending again on a new connection is safe.
_STALE = (
    http.client.RemoteDisconnected,
    ConnectionResetError,
    ConnectionAbortedError,
    BrokenPipeError,
)


class _OutOfTime(Exception):
    """The request's whole time ran out between two socket operations."""


class Response:
    """A decoded answer: status, headers (lower-case names) and the JSON body."""

    __slots__ = ("status", "headers", "body")

    def __init__(self, status: int, headers: dict[str, str], body: Any) -> None:
        self.status = status
        self.headers = headers
        self.body = body


class Transport:
    """Sends requests to one server over a pool of kept-alive connections.

    Each request takes an idle connection from the pool (or opens one), and gives it back
    when the answer has been read completely; at most ``pool_size`` idle connections are
    kept. Any number of threads may send requests at the same time.
    """

    def __init__(
        self,
        url: str,
        *,
        token: Optional[str],
        ssl_context: Optional[ssl.SSLContext],
        pool_size: int,
        user_agent: str,
    ) -> None:
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https"):
            raise ValueError("the URL must start with http:// or https://: %r" % url)
        if not parts.hostname:
            raise ValueError("the URL has no host: %r" % url)
        if parts.query or parts.fragment:
            raise ValueError("the URL must not have a query or a fragment: %r" % url)
        self.scheme = parts.scheme
        self.host = parts.hostname
        self.port = parts.port or (443 if parts.scheme == "https" else 80)
        self.base_path = parts.path.rstrip("/")
        self.url = "%s://%s%s" % (parts.scheme, parts.netloc, self.base_path)
        if self.scheme == "https":
            self.ssl_context: Optional[ssl.SSLContext] = ssl_context or ssl.create_default_context()
        else:
            self.ssl_context = None
        self.pool_size = max(0, pool_size)
        self._headers = {"Accept": "application/json", "User-Agent": user_agent}
        if token is not None:
            self._headers["Authorization"] = "Bearer " + token
        self._idle: list[_Connection] = []
        self._lock = threading.Lock()
        self._closed = False

    # -- pool -------------------------------------------------------------------------

    def _new(self, timeout: float) -> _Connection:
        if self.ssl_context is not None:
            return http.client.HTTPSConnection(
                self.host, self.port, timeout=timeout, context=self.ssl_context
            )
        return http.client.HTTPConnection(self.host, self.port, timeout=timeout)

    def _take(self, timeout: float) -> tuple[_Connection, bool]:
        with self._lock:
            if self._closed:
                raise TransportError("the client is closed")
            conn = self._idle.pop() if self._idle else None
        if conn is None:
            return self._new(timeout), False
        conn.timeout = timeout
        if conn.sock is not None:
            conn.sock.settimeout(timeout)
        return conn, True

    def _give(self, conn: _Connection) -> None:
        with self._lock:
            if not self._closed and len(self._idle) < self.pool_size:
                self._idle.append(conn)
                return
        conn.close()

    def drop_idle(self) -> None:
        """Closes the idle connections, so that the next request connects afresh (and looks
        the server's name up again): after a failure, they may lead nowhere."""
        with self._lock:
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()

    def close(self) -> None:
        """Closes the idle connections; connections in use close when their request ends."""
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()

    # -- requests ---------------------------------------------------------------------

    def path(self, path: str) -> str:
        return self.base_path + path

    def request(
        self,
        method: str,
        path: str,
        body: Optional[dict[str, Any]] = None,
        *,
        timeout: float,
    ) -> Response:
        """Sends one request and returns the answer when it is a 2xx; raises the matching
        :class:`APIError` for an error answer and :class:`TransportError` when there is no
        usable answer."""
        target = self.path(path)
        url = self.url + path
        headers = dict(self._headers)
        data: Optional[bytes] = None
        if body is not None:
            data = json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
            headers["Content-Type"] = "application/json"
        elif method == "POST":
            data = b""
        # ``timeout`` bounds the whole request (connect, send and every read), not each
        # socket operation: a server that answers a byte at a time cannot stretch it.
        deadline = time.monotonic() + timeout
        for attempt in (0, 1):
            conn, reused = self._take(timeout)
            try:
                if conn.sock is None:
                    conn.timeout = self._left(deadline)
                    conn.connect()
                # Kept: getresponse() forgets conn.sock when the server closes after its answer.
                sock = conn.sock
                assert sock is not None  # connect() set it, or raised
                sock.settimeout(self._left(deadline))
                conn.request(method, target, body=data, headers=headers)
                sock.settimeout(self._left(deadline))
                resp = conn.getresponse()
                raw = self._read_all(resp, sock, deadline)
            except _STALE as exc:
                conn.close()
                if reused and attempt == 0:
                    continue  # the server had closed the idle connection: send again
                self.drop_idle()
                raise TransportError(
                    "%s %s: connection lost: %s" % (method, url, exc or type(exc).__name__),
                    method=method, url=url,
                ) from exc
            except (socket.timeout, _OutOfTime) as exc:
                conn.close()
                self.drop_idle()
                raise Timeout(
                    "%s %s: no answer within %.3g s" % (method, url, timeout),
                    method=method, url=url,
                ) from exc
            except (OSError, http.client.HTTPException) as exc:
                conn.close()
                self.drop_idle()
                raise TransportError(
                    "%s %s: %s" % (method, url, exc or type(exc).__name__),
                    method=method, url=url,
                ) from exc
            except BaseException:
                conn.close()
                raise
            if resp.will_close:
                conn.close()
            else:
                self._give(conn)
            return self._decode(method, url, resp, raw)
        raise AssertionError("unreachable")  # pragma: no cover

    @staticmethod
    def _left(deadline: float) -> float:
        left = deadline - time.monotonic()
        if left <= 0:
            raise _OutOfTime()
        return left

    @classmethod
    def _read_all(cls, resp: http.client.HTTPResponse, sock: Any, deadline: float) -> bytes:
        chunks: list[bytes] = []
        while True:
            if sock is not None:
                sock.settimeout(cls._left(deadline))
            chunk = resp.read1(65536)
            if not chunk:
                resp.read()  # marks the answer complete, so that the connection is reusable
                return b"".join(chunks)
            chunks.append(chunk)

    @staticmethod
    def _decode(method: str, url: str, resp: http.client.HTTPResponse, raw: bytes) -> Response:
        headers = {k.lower(): v for k, v in resp.getheaders()}
        status = resp.status
        try:
            body: Any = json.loads(raw.decode("utf-8")) if raw else None
        except ValueError:
            body = None
            parsed = False
        else:
            parsed = True
        if 200 <= status < 300:
            if not parsed or not isinstance(body, dict):
                raise ProtocolError(
                    "%s %s: answer %d is not a JSON object" % (method, url, status),
                    method=method, url=url,
                )
            return Response(status, headers, body)
        error = body.get("error") if isinstance(body, dict) else None
        if isinstance(error, dict) and isinstance(error.get("code"), str):
            code: Optional[str] = error["code"]
            message = str(error.get("message", ""))
            details: dict[str, Any] = error
        else:
            code = None
            text = raw.decode("utf-8", "replace").strip()
            message = text[:200] if text else (resp.reason or "")
            details = {}
        cls = error_class(status, code)
        raise cls(status, code, message, details, headers)

