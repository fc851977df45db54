"""The mutexd client: one method per operation of the HTTP API."""

from __future__ import annotations

import logging
import os
import socket
import ssl
import threading
import time
import urllib.parse
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Optional, Union

from ._errors import APIError, MutexdError, ProtocolError, Timeout, TransportError, Unavailable
from . import _leader
from ._http import Response, Transport
from ._lock import Lock, MultiLock, OrderedLock
from ._partition import PARTITIONS_MAX, partition_of
from ._types import (
    Duration,
    Event,
    EventPage,
    Lease,
    Position,
    ResourceList,
    ResourcePage,
    ResourceState,
    WhoAmI,
    _optional_position,
    check_position,
    later,
    resource_list,
    to_ms,
)
from ._version import __version__

__all__ = ["Client", "default_owner"]

#: The server when neither ``url`` nor ``MUTEXD_URL`` names one.
DEFAULT_URL = "http://127.0.0.1:8080"

# The pause before a call goes round its servers again after 503 answers: their
# Retry-After, at most this long, at least the other.
_RETRY_AFTER_CAP = 2.0
_RETRY_AFTER_MIN = 0.1

# A list watch woken by a change its list does not show is read again after this long.
_REREAD_PAUSE = 0.1

# The partition map is learned again at most this often: while partitions move, every
# request of every thread may meet a surprise, and one refetch a second is enough to follow.
_MAP_INTERVAL = 1.0
# A refetch of the map takes at most this long: it delays the request that saw the surprise.
_MAP_TIMEOUT = 2.0


def _url_key(url: str) -> Optional[tuple[str, str, int, str]]:
    """What tells two spellings of one server URL apart: scheme, host (letter case aside),
    port (the scheme's default when not given), path (without a trailing slash)."""
    try:
        parts = urllib.parse.urlsplit(url.strip())
        port = parts.port or (443 if parts.scheme.lower() == "https" else 80)
    except ValueError:
        return None
    if not parts.hostname:
        return None
    return (parts.scheme.lower(), parts.hostname.lower(), port, parts.path.rstrip("/"))


def _server_urls(url: Union[str, Sequence[str], None]) -> list[str]:
    """The list of server URLs: ``url`` (a string, comma-separated, or a list of them), or
    ``MUTEXD_URL``, or the default."""
    if url is None:
        url = os.environ.get("MUTEXD_URL") or DEFAULT_URL
    items = [url] if isinstance(url, str) else list(url)
    urls: list[str] = []
    for item in items:
        if not isinstance(item, str):
            raise TypeError("a server URL must be a str, not %s" % type(item).__name__)
        urls.extend(part.strip() for part in item.split(",") if part.strip())
    if not urls:
        raise ValueError("no server URL given")
    return urls


def default_owner() -> str:
    """``"<hostname>:<pid>"``, the owner this package sends when none is given."""
    return "%s:%d" % (socket.gethostname(), os.getpid())


def _resource_path(resource: str) -> str:
    if not isinstance(resource, str):
        raise TypeError("resource must be a str, not %s" % type(resource).__name__)
    if not resource:
        raise ValueError("resource must not be empty")
    # The slashes of a hierarchical name stay literal; anything the API does not allow in
    # a name is percent-encoded, so that the server answers invalid_resource for it
    # rather than reading it as a query or another path, and so are a hash tag's `{` and
    # `}`, as the contract asks (%7B, %7D).
    return urllib.parse.quote(resource, safe="/:@")


def _lease_ref(lease: Any, lease_id: Optional[str]) -> tuple[str, str]:
    """(resource, lease_id) from a Lease-like object, or from a resource and a lease id."""
    if isinstance(lease, str):
        if lease_id is None:
            raise TypeError("give a Lease, or a resource and its lease_id")
        return lease, lease_id
    if lease_id is not None:
        raise TypeError("lease_id is only given with a resource name, not with a Lease")
    try:
        return lease.resource, lease.lease_id
    except AttributeError:
        raise TypeError("expected a Lease or a resource name, not %r" % (lease,)) from None


def _leases_ref(leases: Any, lease_id: Optional[str]) -> tuple[list[str], str]:
    """(resources, lease_id) from Lease-like objects of one lease id (or a
    :class:`HeldLeases`), or from names and a lease id."""
    if lease_id is not None:
        return resource_list(leases), lease_id
    if isinstance(leases, (str, bytes)):
        raise TypeError("give Leases, or resource names and their lease_id")
    items = list(leases)
    if not items:
        raise ValueError("no lease given")
    refs = [_lease_ref(item, None) for item in items]
    ids = {lid for _, lid in refs}
    if len(ids) != 1:
        raise ValueError("the leases of one request have one lease id: got %d" % len(ids))
    return [name for name, _ in refs], refs[0][1]


_log = logging.getLogger("mutexd")


class _PartitionMap:
    """What ``GET /v1/servers`` says of the partitions: their count, and each one's owner
    URL (``None`` while none owns it). A count of 1 is a server, or a group, that is not
    partitioned: nothing to route."""

    __slots__ = ("count", "owners")

    def __init__(self, count: int, owners: Sequence[Optional[str]]) -> None:
        self.count = count
        self.owners = tuple(owners)

    @classmethod
    def from_servers(cls, body: Any) -> "_PartitionMap":
        parts = body.get("partitions") if isinstance(body, dict) else None
        if parts is None:
            return cls(1, [None])
        if not isinstance(parts, dict):
            raise ValueError("partitions is not an object")
        count = _int_or_none(parts, "count")
        if count is None or count == 1:
            return cls(1, [None])
        if not 1 < count <= PARTITIONS_MAX:
            raise ValueError("the partition count %d is out of range" % count)
        owners: list[Optional[str]] = [None] * count
        entries = parts.get("owners")
        if not isinstance(entries, list):
            raise ValueError("partitions.owners is not a list")
        for entry in entries:
            number = _int_or_none(entry, "partition")
            if number is None or not 0 <= number < count:
                raise ValueError("an owner's partition is out of range: %r" % (entry,))
            url = entry.get("url")
            if url is not None and not isinstance(url, str):
                raise ValueError("an owner's url is not a string: %r" % (entry,))
            owners[number] = url or None
        return cls(count, owners)


def _int_or_none(data: Any, key: str) -> Optional[int]:
    value = data.get(key) if isinstance(data, dict) else None
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError("the answer's %r is not an integer: %r" % (key, value))
    return value


class Client:
    """A client of a mutexd server, or of a group of servers (``--ha``).

    Args:
        url: the server's base URL, ``http://host:port`` or ``https://host:port``
            (a path prefix is kept, for a server behind a reverse proxy); or several,
            as a list or comma-separated (``"http://a:8080,http://b:8080"``), any of
            which answers any request. Default: ``MUTEXD_URL`` (which may be such a
            list too), else ``http://127.0.0.1:8080``.
        token: sent as ``Authorization: Bearer <token>`` with every request.
        ca_file: a PEM file of the CA certificates that verify an HTTPS server
            (``ssl.create_default_context(cafile=ca_file)``). Without it, the system's
            trusted CAs verify the server.
        ssl_context: a ready ``ssl.SSLContext`` instead of ``ca_file`` (client
            certificates, pinned versions...).
        timeout: seconds a request may take as a whole (connecting, sending, reading the
            answer). An acquire that waits in the queue, and a watch, add their own
            ``wait`` to it, so that the server answers before the client gives up. After
            a request that got no answer, the idle connections are closed, so that the
            next request connects afresh (and looks the server's name up again).
        pool_size: how many idle keep-alive connections are kept for reuse.

    Durations are seconds, as ``float`` (or ``int`` or ``datetime.timedelta``); the API
    speaks integer milliseconds, so they are rounded to the nearest millisecond.

    Threads: a ``Client`` may be shared by any number of threads. Each request takes a
    kept-alive connection of its own from a locked pool (or opens a new one) and gives it
    back when the answer is read, so a long watch or a waiting acquire never delays
    another thread's renewal. :meth:`close` closes the idle connections; the client can
    also be used as a context manager.

    Several servers: a request goes to the server that answered last (the first at the
    start). On a :class:`TransportError` (no connection, no answer within ``timeout``, an
    answer that is not the API's) or a 503 :class:`Unavailable`, it is sent to the next
    one, each at most once per round. When a round ends in failures and some of them were
    503 answers, the call pauses for their ``Retry-After`` (at most 2 s) and goes round
    again, as long as that leaves it within ``timeout`` of its start; otherwise it raises
    the last attempt's error. Any other answer, an error included, ends the call and makes
    that server the one asked first next time; but when the answer names the active
    server of a group (``Mutexd-Served-By``) and that is one of the URLs given, the active
    is asked first next time, so that requests stop crossing a standby. With one URL, a
    request is sent once.

    A partitioned group (``--partitions N``): the first answer that names a resource's
    partition (``Mutexd-Partition``) makes the client read the partition map
    (``GET /v1/servers``). From then on, a request about one resource (acquire, renew,
    release, break, get, watch, and so the lock and the leader loop) goes first to the
    owner of the resource's partition, at its advertised URL, so that no server has to
    forward it; when that fails, the request goes round the URLs given as above. A request
    about several resources (``acquire_many``, ``renew_many``, ``release_many``) goes as
    one about its first name: they all are in its partition. Lists, events and whoami go
    as before. The map is read again, at most once a second and without ever failing a
    request, when an answer about a resource was served by another server than the one
    asked, or after a 503 or no answer: the partition has moved.

    Retries: when a kept-alive connection turns out to have been closed by the server
    before it read the request, the request is sent once more on a new connection. To make
    that resend, the move to another server (and your own retries) safe, :meth:`acquire`
    always proposes a ``lease_id``: an acquire repeated with the same ``lease_id`` gets the
    same lease back.
    """

    def __init__(
        self,
        url: Union[str, Sequence[str], None] = None,
        *,
        token: Optional[str] = None,
        ca_file: Optional[str] = None,
        ssl_context: Optional[ssl.SSLContext] = None,
        timeout: float = 10.0,
        pool_size: int = 8,
    ) -> None:
        if ca_file is not None and ssl_context is not None:
            raise ValueError("give ca_file or ssl_context, not both")
        if ca_file is not None:
            ssl_context = ssl.create_default_context(cafile=ca_file)
        if not timeout > 0:
            raise ValueError("timeout must be positive")
        self.timeout = float(timeout)
        self._transports = [
            Transport(
                u,
                token=token,
                ssl_context=ssl_context,
                pool_size=pool_size,
                user_agent="mutexd-python/%s" % __version__,
            )
            for u in _server_urls(url)
        ]
        # The server asked first: the one that answered last, or the active it named.
        # Read and written without a lock: a plain int, and any value is a valid choice.
        self._current = 0
        self._index_of: dict[tuple[str, str, int, str], int] = {}
        for i, t in enumerate(self._transports):
            key = _url_key(t.url)
            if key is not None:
                self._index_of.setdefault(key, i)
        self._transport_args: dict[str, Any] = dict(
            token=token, ssl_context=ssl_context, pool_size=pool_size,
            user_agent="mutexd-python/%s" % __version__,
        )
        # The partition map: None until an answer shows a partitioned group (then read
        # once), a count of 1 when the group turned out not to be. Replaced whole, so that
        # a reader always sees one map.
        self._map: Optional[_PartitionMap] = None
        self._map_lock = threading.Lock()  # held by the one thread reading the map
        self._map_read_at = float("-inf")  # time.monotonic() of the last reading
        self._map_due = False  # a surprise asked for a reading that the interval put off
        # The owners' advertised URLs that are not among those given: a transport each.
        self._owners: dict[tuple[str, str, int, str], Transport] = {}
        self._owners_lock = threading.Lock()
        self._closed = False

    @property
    def url(self) -> str:
        """The base URL of the server asked first: the one that answered last."""
        return self._transports[self._current].url

    @property
    def urls(self) -> tuple[str, ...]:
        """Every server's base URL, in the order given."""
        return tuple(t.url for t in self._transports)

    def close(self) -> None:
        """Closes the kept-alive connections. Requests after this raise TransportError."""
        with self._owners_lock:
            self._closed = True
            owners = list(self._owners.values())
        for t in self._transports + owners:
            t.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return "Client(%r)" % ",".join(self.urls)

    # -- plumbing ---------------------------------------------------------------------

    def _send(
        self,
        method: str,
        path: str,
        body: Optional[dict[str, Any]],
        timeout: float,
        deadline: Optional[float] = None,
        resource: Optional[str] = None,
    ) -> Response:
        """Sends a request to the servers in turn (see the class's "Several servers").
        ``timeout`` bounds each attempt; ``deadline`` (``time.monotonic()``), when given,
        bounds the whole call: no attempt starts or lasts past it. A request about
        ``resource`` goes to its partition's owner first, when the map names one."""
        if resource is None:
            return self._attempts(method, path, body, timeout, deadline, None, [])
        if self._map_due:
            self._read_map()
        surprises: list[bool] = []
        try:
            return self._attempts(method, path, body, timeout, deadline, resource, surprises)
        finally:
            # Read after the call rather than during it: the map serves the next requests,
            # and this one's attempts and deadline stay as they were.
            if surprises:
                self._read_map()

    def _attempts(
        self,
        method: str,
        path: str,
        body: Optional[dict[str, Any]],
        timeout: float,
        deadline: Optional[float],
        resource: Optional[str],
        surprises: list[bool],
    ) -> Response:
        """The attempts of :meth:`_send`, round after round; a surprise that calls for
        reading the partition map again is appended to ``surprises``."""
        start = time.monotonic()
        end = start + timeout if deadline is None else min(start + timeout, deadline)
        last: Optional[MutexdError] = None
        pause: Optional[float] = None  # the round's smallest Retry-After, if it had a 503
        rounds = 0
        while True:
            order = self._order(resource)
            if rounds:  # back at the servers tried in this call
                assert last is not None
                if len(order) == 1 or pause is None:
                    raise last
                wait = min(_RETRY_AFTER_CAP, max(_RETRY_AFTER_MIN, pause))
                if time.monotonic() + wait >= end:
                    raise last
                time.sleep(wait)
                pause = None
            rounds += 1
            for transport, index in order:
                limit = timeout
                if deadline is not None:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        if last is not None:
                            raise last
                        raise Timeout(
                            "%s %s: the deadline passed before the request was sent"
                            % (method, transport.url + path),
                            method=method, url=transport.url + path,
                        )
                    limit = min(limit, left)
                try:
                    resp = transport.request(method, path, body, timeout=limit)
                except TransportError as exc:
                    last = exc
                    self._failed(resource, surprises)
                    continue
                except Unavailable as exc:
                    last = exc
                    after = exc.retry_after if exc.retry_after is not None else 0.0
                    pause = after if pause is None else min(pause, after)
                    self._failed(resource, surprises)
                    continue
                except APIError as exc:
                    # An error is an answer too.
                    self._answered(index, exc.headers, transport, resource, surprises)
                    raise
                self._answered(index, resp.headers, transport, resource, surprises)
                return resp

    def _order(self, resource: Optional[str]) -> list[tuple[Transport, int]]:
        """The servers to try, in order, each once, with their index among those given (-1
        for an owner URL that is not one of them): the owner of the resource's partition
        first, when the map names one; then the given ones from the one asked first."""
        transports = self._transports
        count = len(transports)
        first = self._current
        order = [(transports[(first + i) % count], (first + i) % count) for i in range(count)]
        owner = self._owner_of(resource) if resource is not None else None
        if owner is None:
            return order
        key = _url_key(owner)
        if key is None:
            return order
        index = self._index_of.get(key)
        if index is not None:
            return [(transports[index], index)] + [o for o in order if o[1] != index]
        transport = self._owner_transport(owner, key)
        if transport is None:
            return order
        return [(transport, -1)] + order

    def _owner_of(self, resource: str) -> Optional[str]:
        """The advertised URL of the owner of the resource's partition, if the map names
        one."""
        m = self._map
        if m is None or m.count == 1:
            return None
        return m.owners[partition_of(resource, m.count)]

    def _owner_transport(
        self, url: str, key: tuple[str, str, int, str]
    ) -> Optional[Transport]:
        """The transport to an owner URL that is not among those given, made at its first
        use and kept: owners are the group's few servers."""
        with self._owners_lock:
            if self._closed:
                return None
            transport = self._owners.get(key)
            if transport is None:
                try:
                    transport = Transport(url, **self._transport_args)
                except ValueError:
                    # An owner URL this client cannot reach (say, without a scheme): the
                    # given servers forward to it instead.
                    return None
                self._owners[key] = transport
            return transport

    def _failed(self, resource: Optional[str], surprises: list[bool]) -> None:
        """No answer, or a 503, to a request about ``resource``: on a partitioned group,
        its partition may have moved."""
        m = self._map
        if resource is not None and m is not None and m.count > 1:
            surprises.append(True)

    def _answered(
        self,
        index: int,
        headers: Mapping[str, str],
        transport: Optional[Transport] = None,
        resource: Optional[str] = None,
        surprises: Optional[list[bool]] = None,
    ) -> None:
        """Server ``index`` answered: ask it first next time, or the active server it
        forwarded to, when that is one of ours. An answer about a resource may also ask
        for the partition map: the first that names a partition, and one served by
        another server than ``transport``, the one asked."""
        served = headers.get("mutexd-served-by")
        if resource is not None and surprises is not None and transport is not None:
            m = self._map
            if m is None:
                if "mutexd-partition" in headers:
                    surprises.append(True)
            elif m.count > 1 and served and _url_key(served) != _url_key(transport.url):
                surprises.append(True)
        if index < 0:
            return  # an owner that is not one of ours: the one asked first stays
        if served and len(self._transports) > 1:
            key = _url_key(served)
            if key is not None:
                index = self._index_of.get(key, index)
        self._current = index

    def _read_map(self) -> None:
        """Reads the partition map from ``GET /v1/servers``, unless it was read less than
        a second ago (then the next request about a resource reads it), another thread is
        reading it, or the group is known not to be partitioned. A failure keeps the map
        as it was: it is logged, never raised, as the request that asked has its answer."""
        m = self._map
        if m is not None and m.count == 1:
            return
        if time.monotonic() - self._map_read_at < _MAP_INTERVAL:
            self._map_due = True
            return
        if not self._map_lock.acquire(blocking=False):
            return  # another thread is reading it: this one goes on with the map it has
        try:
            if time.monotonic() - self._map_read_at < _MAP_INTERVAL:
                self._map_due = True
                return
            self._map_read_at = time.monotonic()
            self._map_due = False
            try:
                resp = self._send("GET", "/v1/servers", None, min(self.timeout, _MAP_TIMEOUT))
                self._map = _PartitionMap.from_servers(resp.body)
            except (MutexdError, ValueError, TypeError) as exc:
                self._map_due = True
                _log.debug("mutexd: reading the partition map failed: %s", exc)
        finally:
            self._map_lock.release()

    def _post(
        self,
        resource: str,
        action: str,
        body: dict[str, Any],
        timeout: Optional[float] = None,
        deadline: Optional[float] = None,
    ) -> Response:
        path = "/v1/resources/%s/%s" % (_resource_path(resource), action)
        return self._send(
            "POST", path, body, self.timeout if timeout is None else timeout, deadline,
            resource,
        )

    def _get(
        self,
        path: str,
        query: Mapping[str, Any],
        timeout: Optional[float] = None,
        resource: Optional[str] = None,
    ) -> Response:
        if query:
            path += "?" + urllib.parse.urlencode(query, safe="/:@")
        return self._send(
            "GET", path, None, self.timeout if timeout is None else timeout, None, resource
        )

    @staticmethod
    def _parse(build: Callable[[], Any]) -> Any:
        try:
            return build()
        except (ValueError, TypeError, KeyError) as exc:
            raise ProtocolError("the server's answer is malformed: %s" % exc) from exc

    def _parse_many(self, body: Any, names: Sequence[str], base: float) -> list[Lease]:
        """The leases of an answer about several resources: one per name, in order."""

        def build() -> list[Lease]:
            items = body.get("leases") if isinstance(body, dict) else None
            if not isinstance(items, list) or len(items) != len(names):
                raise ValueError("leases is not a list of one lease per resource")
            leases = []
            for item in items:
                if not isinstance(item, dict):
                    raise ValueError("a lease is not an object: %r" % (item,))
                leases.append(Lease.from_json(item, base))
            if [lease.resource for lease in leases] != list(names):
                raise ValueError("the leases are not those of the resources asked for, in order")
            return leases

        return self._parse(build)  # type: ignore[no-any-return]

    def _post_many(
        self,
        action: str,
        names: Sequence[str],
        body: dict[str, Any],
        timeout: Optional[float] = None,
        deadline: Optional[float] = None,
    ) -> Response:
        """A request about several resources, routed as one about the first: on a
        partitioned group they all are in its partition."""
        return self._send(
            "POST", "/v1/" + action, body, self.timeout if timeout is None else timeout,
            deadline, names[0],
        )

    def _acquire(
        self,
        post: Callable[[dict[str, Any], float], Response],
        body: dict[str, Any],
        owner: Optional[str],
        ttl: Optional[Duration],
        wait: Duration,
        lease_id: Optional[str],
        metadata: Optional[Mapping[str, Any]],
        limit: Optional[int],
        shared: bool,
    ) -> tuple[Any, float]:
        """What :meth:`acquire` and :meth:`acquire_many` share: the fields of the request
        (after those ``body`` has), the request (``post(body, timeout)``), and then the
        answer's body and the ``time.monotonic()`` the leases' time runs from."""
        body["owner"] = default_owner() if owner is None else owner
        body["lease_id"] = str(uuid.uuid4()) if lease_id is None else lease_id
        if ttl is not None:
            body["ttl_ms"] = to_ms(ttl, "ttl")
        wait_ms = to_ms(wait, "wait")
        if wait_ms:
            body["wait_ms"] = wait_ms
        if metadata is not None:
            body["metadata"] = dict(metadata)
        # Sent only when asked for: a server without semaphores rejects unknown fields, and
        # without them the request means what it always meant.
        if limit is not None:
            if isinstance(limit, bool) or not isinstance(limit, int):
                raise TypeError("limit must be an int, not %r" % (limit,))
            body["limit"] = limit
        if not isinstance(shared, bool):
            raise TypeError("shared must be a bool, not %r" % (shared,))
        if shared:
            body["shared"] = True
        sent = time.monotonic()
        resp = post(body, self.timeout + wait_ms / 1000.0)
        # The lease's time runs from the grant: at the latest when the request was sent,
        # or, after a wait in the queue, when the answer arrived.
        return resp.body, (sent if not wait_ms else time.monotonic())

    @staticmethod
    def _renew(
        post: Callable[[dict[str, Any]], Response],
        body: dict[str, Any],
        ttl: Optional[Duration],
        metadata: Optional[Mapping[str, Any]],
    ) -> tuple[Any, float]:
        """What :meth:`renew` and :meth:`renew_many` share: the optional fields of the
        request (after those ``body`` has), the request (``post(body)``), and then the
        answer's body and the ``time.monotonic()`` it was sent at (the leases' time runs
        from then)."""
        if ttl is not None:
            body["ttl_ms"] = to_ms(ttl, "ttl")
        if metadata is not None:
            body["metadata"] = dict(metadata)
        sent = time.monotonic()
        return post(body).body, sent

    # -- leases -----------------------------------------------------------------------

    def acquire(
        self,
        resource: str,
        owner: Optional[str] = None,
        ttl: Optional[Duration] = None,
        wait: Duration = 0,
        lease_id: Optional[str] = None,
        metadata: Optional[Mapping[str, Any]] = None,
        *,
        limit: Optional[int] = None,
        shared: bool = False,
    ) -> Lease:
        """Acquires a lease on ``resource``.

        Args:
            owner: who holds it, for people and tools; default ``"<hostname>:<pid>"``.
            ttl: the lease's time to live in seconds; ``None``: the server's default (15 s).
            wait: how long to wait in the resource's FIFO queue when it is held; 0 (the
                default) answers at once.
            lease_id: the lease id to propose; default: a new random UUID. Acquiring again
                with the id of the resource's current lease returns that lease with a
                fresh TTL and the same fencing token; the move to another server after a
                lost answer sends the same id, and so gets the same lease.
            metadata: a JSON object stored with the lease (at most 4096 bytes
                serialized), for example the leader's address.
            limit: how many leases may hold the resource at once (1 to the server's
                ``--max-holders``); more than 1 makes it a counting semaphore, each
                holder with a lease of its own. ``None`` (the default) sends none, which
                the server reads as 1. The limit belongs to the resource while it has
                holders: naming another one then raises :class:`LimitMismatch`.
            shared: a shared lease (a reader): shared leases hold the resource together
                while no exclusive lease (the default, a writer) holds it. Only with a
                ``limit`` of 1 (or none).

        Returns: the :class:`Lease`.

        Raises:
            LeaseHeld: another lease holds the resource (``holder`` says who,
                ``retry_after`` when it expires), at once or when ``wait`` ran out; for a
                semaphore, every place is taken.
            LimitMismatch: the resource is held under another ``limit`` (``limit``
                says which).
            TooManyWaiters: the queue of waiters is full.
            InvalidRequest: a bad name, TTL, wait, owner, lease id, metadata or limit,
                or ``shared`` with a ``limit`` other than 1.
        """
        answer, base = self._acquire(
            lambda body, timeout: self._post(resource, "acquire", body, timeout),
            {}, owner, ttl, wait, lease_id, metadata, limit, shared,
        )
        return self._parse(lambda: Lease.from_json(answer, base))  # type: ignore[no-any-return]

    def renew(
        self,
        lease: Union[Lease, str, Any],
        lease_id: Optional[str] = None,
        *,
        ttl: Optional[Duration] = None,
        metadata: Optional[Mapping[str, Any]] = None,
        timeout: Optional[float] = None,
        deadline: Optional[float] = None,
    ) -> Lease:
        """Renews a lease: it now expires ``ttl`` (default: its own TTL) from now and keeps
        its fencing token. ``metadata``, if given, replaces the lease's.

        Call as ``renew(lease)`` or ``renew(resource, lease_id)``. Works also after the
        lease expired, as long as no other lease was granted since.

        ``timeout`` bounds each attempt. ``deadline``, a ``time.monotonic()`` value (for
        example the lease's own :attr:`Lease.deadline`), bounds the whole call: no attempt
        is started, or lasts, past it; :class:`Timeout` (or the last attempt's error) is
        raised then.

        Raises:
            LeaseLost: the lease is no longer the resource's.
        """
        resource, lid = _lease_ref(lease, lease_id)
        answer, sent = self._renew(
            lambda body: self._post(resource, "renew", body, timeout, deadline),
            {"lease_id": lid}, ttl, metadata,
        )
        return self._parse(lambda: Lease.from_json(answer, sent))  # type: ignore[no-any-return]

    def release(
        self,
        lease: Union[Lease, str, Any],
        lease_id: Optional[str] = None,
        *,
        timeout: Optional[float] = None,
    ) -> None:
        """Releases a lease; the resource's next waiter is granted at once.

        Call as ``release(lease)`` or ``release(resource, lease_id)``.

        Raises:
            LeaseLost: the lease is no longer the resource's (the current holder, if any,
                keeps its lease).
        """
        resource, lid = _lease_ref(lease, lease_id)
        self._post(resource, "release", {"lease_id": lid}, timeout)

    def break_lease(
        self, resource: str, reason: Optional[str] = None, *, lease_id: Optional[str] = None
    ) -> bool:
        """Ends the resource's leases, whoever holds them (an operator's tool): every one,
        or only the one whose id is ``lease_id``. The next waiters are granted as they
        fit. Needs the ``admin`` scope when authorization is on.

        Returns: True when a lease was ended, False when there was none (or ``lease_id``
        holds nothing).
        """
        body: dict[str, Any] = {}
        if reason is not None:
            body["reason"] = reason
        if lease_id is not None:
            body["lease_id"] = lease_id
        resp = self._post(resource, "break", body)
        return bool(resp.body.get("broken"))

    # -- several resources at once ------------------------------------------------------

    def acquire_many(
        self,
        resources: Sequence[str],
        owner: Optional[str] = None,
        ttl: Optional[Duration] = None,
        wait: Duration = 0,
        lease_id: Optional[str] = None,
        metadata: Optional[Mapping[str, Any]] = None,
        *,
        limit: Optional[int] = None,
        shared: bool = False,
    ) -> list[Lease]:
        """Acquires a lease on every resource of ``resources`` (2 to 64 names, each once),
        or on none, with one request; the other arguments are :meth:`acquire`'s and apply
        to each.

        Returns: the leases, one per resource in the order given, all with one
        ``lease_id`` (proposed by the client unless given: a retry with the same id and
        the same names gets the same leases back), each with its own fencing token.

        With ``wait``, the request waits in the queue of every resource and is granted
        all at once, whatever order the names of concurrent requests are in (no deadlock).
        On a partitioned group the names must all be in one partition (a hash tag,
        ``{acct}/alice``): otherwise :class:`InvalidRequest` (``field`` ``resources``);
        the request goes to the owner of that partition. For resources of different
        partitions, see :meth:`lock_ordered`.

        Raises:
            LeaseHeld: a resource is held (at once, or when ``wait`` ran out): its
                ``resource`` is the first held in the order given, ``holder`` who holds
                it. Nothing was granted.
            LimitMismatch, TooManyWaiters, InvalidRequest: as :meth:`acquire`.
        """
        names = resource_list(resources)
        answer, base = self._acquire(
            lambda body, timeout: self._post_many("acquire", names, body, timeout),
            {"resources": names}, owner, ttl, wait, lease_id, metadata, limit, shared,
        )
        return self._parse_many(answer, names, base)

    def renew_many(
        self,
        leases: Union[Sequence[Lease], Sequence[str], Any],
        lease_id: Optional[str] = None,
        *,
        ttl: Optional[Duration] = None,
        metadata: Optional[Mapping[str, Any]] = None,
        timeout: Optional[float] = None,
        deadline: Optional[float] = None,
    ) -> list[Lease]:
        """Renews the leases of a set with one request: each now expires ``ttl`` (default:
        its own TTL) from now and keeps its fencing token. Call as ``renew_many(leases)``
        (the list :meth:`acquire_many` returned, or a :class:`HeldLeases`) or
        ``renew_many(resources, lease_id)``. ``timeout`` and ``deadline`` are
        :meth:`renew`'s.

        Returns: the leases, in the order given.

        Raises:
            LeaseLost: the lease id no longer holds some of the resources: ``resources``
                names them. The others WERE renewed.
        """
        names, lid = _leases_ref(leases, lease_id)
        answer, sent = self._renew(
            lambda body: self._post_many("renew", names, body, timeout, deadline),
            {"resources": names, "lease_id": lid}, ttl, metadata,
        )
        return self._parse_many(answer, names, sent)

    def release_many(
        self,
        leases: Union[Sequence[Lease], Sequence[str], Any],
        lease_id: Optional[str] = None,
        *,
        timeout: Optional[float] = None,
    ) -> None:
        """Releases the leases of a set with one request; each resource's next waiter is
        granted at once. Call as ``release_many(leases)`` or
        ``release_many(resources, lease_id)``.

        Raises:
            LeaseLost: the lease id no longer holds some of the resources: ``resources``
                names them. The others WERE released.
        """
        names, lid = _leases_ref(leases, lease_id)
        self._post_many("release", names, {"resources": names, "lease_id": lid}, timeout)

    # -- reading ----------------------------------------------------------------------

    def get(self, resource: str) -> ResourceState:
        """The state of ``resource`` (a name never used is simply free)."""
        resp = self._get("/v1/resources/" + _resource_path(resource), {}, None, resource)
        return self._parse(lambda: ResourceState.from_json(resp.body))  # type: ignore

    def watch(self, resource: str, index: int, wait: Duration = 60.0) -> ResourceState:
        """Waits until the state of ``resource`` differs from ``index`` (the ``index`` of
        the state you last saw), or ``wait`` seconds pass; returns the state then (the
        unchanged state when the wait ran out). ``wait`` is at most the server's
        ``--max-wait-ms`` (default 300 s).
        """
        if isinstance(index, bool) or not isinstance(index, int) or index < 0:
            raise ValueError("index must be a non-negative int")
        wait_ms = to_ms(wait, "wait")
        resp = self._get(
            "/v1/resources/" + _resource_path(resource),
            {"index": index, "wait_ms": wait_ms},
            self.timeout + wait_ms / 1000.0,
            resource,
        )
        return self._parse(lambda: ResourceState.from_json(resp.body))  # type: ignore

    def list_page(
        self,
        prefix: Optional[str] = None,
        limit: Optional[int] = None,
        cursor: Optional[str] = None,
    ) -> ResourcePage:
        """One page of held resources in name order: those whose name starts with
        ``prefix``, at most ``limit`` (server default 100, at most 1000), after
        ``cursor`` (the ``next_cursor`` of the previous page)."""
        query: dict[str, Any] = {}
        if prefix is not None:
            query["prefix"] = prefix
        if limit is not None:
            query["limit"] = limit
        if cursor is not None:
            query["cursor"] = cursor
        return self._list_page(query, None)

    def _list_page(self, query: dict[str, Any], wait_ms: Optional[int]) -> ResourcePage:
        """A GET of the list; a list watch when ``wait_ms`` is given (with ``index`` in
        ``query``)."""
        if wait_ms is None:
            resp = self._get("/v1/resources", query)
        else:
            query["wait_ms"] = wait_ms
            resp = self._get("/v1/resources", query, self.timeout + wait_ms / 1000.0)

        def build() -> ResourcePage:
            items = resp.body.get("resources")
            if not isinstance(items, list):
                raise ValueError("resources is not a list")
            nxt = resp.body.get("next_cursor")
            return ResourcePage(
                [ResourceState.from_json(item) for item in items],
                nxt if isinstance(nxt, str) and nxt else None,
                _optional_position(resp.body, "index"),
            )

        return self._parse(build)  # type: ignore[no-any-return]

    def list(
        self, prefix: Optional[str] = None, limit: Optional[int] = None
    ) -> Iterator[ResourceState]:
        """Iterates over every held resource (whose name starts with ``prefix``), in name
        order, fetching pages of ``limit`` entries with the cursor as it goes."""
        cursor: Optional[str] = None
        while True:
            page = self.list_page(prefix, limit, cursor)
            for state in page.resources:
                yield state
            if page.next_cursor is None:
                return
            cursor = page.next_cursor

    # -- watching many resources, and recent events -------------------------------------

    def watch_list(
        self,
        prefix: Optional[str] = None,
        index: Optional[Position] = 0,
        wait: Duration = 60.0,
    ) -> ResourceList:
        """A list watch: waits until a resource whose name starts with ``prefix`` changes
        after the change ``index`` (a grant, renewal, release, break or expiry; also when
        it becomes free and leaves the list), or ``wait`` seconds pass, and returns every
        held resource under ``prefix`` then (as it was when the wait ran out), with the
        change index to watch from next. ``index=0, wait=0`` (or ``index=None``) reads the
        list at once. ``wait`` is at most the server's ``--max-wait-ms`` (default 300 s).

        On a partitioned group (``--partitions N``, N > 1) the index is a position, a
        ``str``: pass the ``index`` of a list read there unchanged (a number other than
        that first read's 0 is refused, :class:`InvalidRequest`).

        The server answers when something under the prefix changed, which may leave the
        list as it was (a lease granted and released meanwhile); :meth:`watch_prefix`
        leaves those out.
        """
        if index is not None:
            check_position(index, "index")
        wait_ms = to_ms(wait, "wait")
        query: dict[str, Any] = {"limit": 1000}
        if prefix is not None:
            query["prefix"] = prefix
        if index is None or (index == 0 and wait_ms == 0):
            # The list at once, the same answer on every group: a partitioned one refuses
            # the number 0.
            first = self._list_page(query, None)
        else:
            query["index"] = index
            first = self._list_page(query, wait_ms)
        if first.index is None:
            raise ProtocolError("the server's list has no index: it has no list watch")
        resources = list(first.resources)
        cursor = first.next_cursor
        while cursor is not None:  # the other pages, at once
            page = self.list_page(prefix, 1000, cursor)
            resources.extend(page.resources)
            cursor = page.next_cursor
        return ResourceList(first.index, resources)

    def watch_prefix(
        self, prefix: str = "", wait: Duration = 60.0, index: Optional[Position] = None
    ) -> Iterator[ResourceList]:
        """Iterates over the held resources under ``prefix`` as they change::

            for held in client.watch_prefix("jobs/"):
                print(held.index, held.names())

        Yields the list at once (unless ``index`` is given: then only once something
        under ``prefix`` changed after it), then again after each change under
        ``prefix`` (a grant, renewal, release, break or expiry), following the server's
        change index with one list watch of up to ``wait`` seconds at a time; changes
        elsewhere yield nothing, nor do changes that leave the list as it was. It never
        ends by itself: break out of the loop. An error (no answer, 503) ends it with the
        exception; start again from the last ``index`` seen to miss nothing.
        """
        if not isinstance(prefix, str):
            raise TypeError("prefix must be a str, not %s" % type(prefix).__name__)
        wait_ms = to_ms(wait, "wait")
        seen: Optional[list[tuple[str, int]]] = None
        at: Position
        if index is None:
            current = self.watch_list(prefix, None)
            yield current
            at = current.index
            seen = [(r.resource, r.index) for r in current.resources]
        else:
            at = index
        while True:
            started = time.monotonic()
            current = self.watch_list(prefix, at, wait_ms / 1000.0)
            # Answered before the wait ran out: something under the prefix changed.
            woken = time.monotonic() - started < wait_ms / 1000.0 - 0.05
            now = [(r.resource, r.index) for r in current.resources]
            if woken and (seen is None or now == seen):
                # A change that the list does not show: the server may answer a moment
                # before the change reads in the list. Read it once more, shortly.
                time.sleep(_REREAD_PAUSE)
                current = self.watch_list(prefix, at, 0)
                now = [(r.resource, r.index) for r in current.resources]
            changed = woken if seen is None else now != seen
            at = later(at, current.index)
            seen = now
            if changed:
                yield current

    def events_page(
        self,
        after: Optional[Position] = 0,
        prefix: Optional[str] = None,
        limit: Optional[int] = None,
        wait: Duration = 0,
    ) -> EventPage:
        """One request of the recent changes after change index ``after`` (0: the oldest
        the server keeps), oldest first: at most ``limit`` (server default 100, at most
        1000), of resources whose name starts with ``prefix``. With ``wait``, when there
        is none yet the request waits up to that long for one. See :class:`EventPage` for
        ``next`` and ``truncated``. On a partitioned group ``after`` is the ``next`` of a
        page read there, a position (``str``), passed unchanged; 0 or ``None`` asks from
        the oldest on any group."""
        query: dict[str, Any] = {}
        if after is not None:
            check_position(after, "after")
            if after != 0:  # the server's default: a partitioned group refuses the number
                query["after"] = after
        if prefix is not None:
            query["prefix"] = prefix
        if limit is not None:
            query["limit"] = limit
        wait_ms = to_ms(wait, "wait")
        if wait_ms:
            query["wait_ms"] = wait_ms
        resp = self._get("/v1/events", query, self.timeout + wait_ms / 1000.0)
        return self._parse(lambda: EventPage.from_json(resp.body))  # type: ignore

    def events(
        self,
        prefix: Optional[str] = None,
        *,
        after: Optional[Position] = None,
        follow: bool = False,
        wait: Duration = 60.0,
        limit: Optional[int] = None,
        on_truncated: Optional[Callable[[Position], Any]] = None,
    ) -> Iterator[Event]:
        """Iterates over the recent changes, oldest first::

            for ev in client.events(prefix="jobs/", follow=True):
                print(ev.index, ev.type, ev.resource, ev.owner, ev.fencing_token)

        From the oldest the server keeps, or after the change index ``after`` (on a
        partitioned group, a position: the ``next`` of an :meth:`events_page`); of the
        resources whose name starts with ``prefix``. Without ``follow`` it ends with the
        last change there is; with it, it keeps waiting (``wait`` seconds per request,
        passing each answer's ``next`` as the next ``after``) and yields each change as it
        comes, until you break out of the loop. ``limit`` is the events per request (default
        1000).

        When changes after the index asked for were already dropped (the history is
        full, or the server restarted), ``on_truncated(after)`` is called before the
        events that follow the gap (by default, a warning on the ``mutexd`` logger): some
        changes were missed. Without ``after``, the first answer starts at the oldest kept
        without that. An error ends the iteration with the exception; start again with
        ``after`` set to the last event's ``index`` to miss nothing (on a partitioned
        group, where each event's ``index`` is its partition's, from a page's ``next``
        with :meth:`events_page`).
        """
        at: Position = 0 if after is None else after
        report = after is not None
        per_request = 1000 if limit is None else limit
        full = False
        while True:
            # A full answer may have more behind it: the next one is asked at once.
            page = self.events_page(at, prefix, per_request, wait if follow and not full else 0)
            if page.truncated and report:
                if on_truncated is not None:
                    on_truncated(at)
                else:
                    _log.warning(
                        "mutexd events: changes after index %s were dropped by the server "
                        "(it keeps the last --event-history only); some were missed", at)
            report = True
            for ev in page.events:
                yield ev
            at = later(at, page.next)
            full = len(page.events) >= per_request
            if not follow and not full:
                return

    def whoami(self) -> WhoAmI:
        """The name and scopes of the client's token, as the server sees it (any valid
        token may ask; none or a bad one raises :class:`Unauthorized`). With
        authorization off: no name, and every scope."""
        resp = self._get("/v1/whoami", {})
        return self._parse(lambda: WhoAmI.from_json(resp.body))  # type: ignore

    # -- helpers ----------------------------------------------------------------------

    def lock(
        self,
        resource: str,
        ttl: Duration = 15.0,
        wait: Duration = 30.0,
        owner: Optional[str] = None,
        metadata: Optional[Mapping[str, Any]] = None,
        *,
        limit: Optional[int] = None,
        shared: bool = False,
    ) -> Lock:
        """A context manager that holds a lease on ``resource`` while its body runs.

        On entry it acquires the lease, waiting up to ``wait`` seconds in the queue
        (raises :class:`LeaseHeld` if that runs out), and returns a :class:`HeldLease`.
        ``limit`` and ``shared`` are :meth:`acquire`'s: ``lock(name, limit=3)`` takes one
        of three places of a semaphore, ``lock(name, shared=True)`` a shared lease.
        A background thread renews the lease every third of ``ttl``. The ``lost`` event of
        the :class:`HeldLease` is set the moment a renewal is answered ``lease_lost``, or
        when renewals keep failing (transient errors are retried) until the lease's
        deadline passes, measured on this process's monotonic clock from the last
        successful renewal. Stop the guarded work at once when it is set.

        On exit it stops renewing and releases the lease. The release is best effort: a
        failure is logged (logger ``mutexd``) and never raised, so it cannot hide an
        exception of the body.
        """
        return Lock(
            self, resource, ttl=ttl, wait=wait, owner=owner, metadata=metadata,
            limit=limit, shared=shared,
        )

    def lock_many(
        self,
        resources: Sequence[str],
        ttl: Duration = 15.0,
        wait: Duration = 30.0,
        owner: Optional[str] = None,
        metadata: Optional[Mapping[str, Any]] = None,
        *,
        limit: Optional[int] = None,
        shared: bool = False,
    ) -> MultiLock:
        """A context manager that holds a lease on every resource of ``resources`` (2 to
        64 names, each once) while its body runs, taken all at once or not at all::

            with client.lock_many(["acct/alice", "acct/bob"], ttl=15, wait=30) as leases:
                leases.check()
                move(100, leases["acct/alice"].fencing_token, leases["acct/bob"].fencing_token)

        On entry it acquires them with one request (:meth:`acquire_many`), waiting up to
        ``wait`` seconds in the queue of every resource (raises :class:`LeaseHeld`, naming
        the first held in ``resource``, if that runs out), and returns a
        :class:`HeldLeases`. A background thread renews the whole set with one request
        every third of ``ttl``; its ``lost`` event is set the moment a renewal is answered
        ``lease_lost`` (ANY lease of the set was lost), or when renewals keep failing until
        the deadline, as for :meth:`lock`. On exit it stops renewing and releases the set
        with one request, best effort, as :meth:`lock` does.

        On a partitioned group the names must share a partition (a hash tag:
        ``{acct}/alice``, ``{acct}/bob``); for names of different partitions, see
        :meth:`lock_ordered`.
        """
        return MultiLock(
            self, resource_list(resources), ttl=ttl, wait=wait, owner=owner,
            metadata=metadata, limit=limit, shared=shared,
        )

    def lock_ordered(
        self,
        resources: Sequence[str],
        ttl: Duration = 15.0,
        wait: Duration = 30.0,
        owner: Optional[str] = None,
        metadata: Optional[Mapping[str, Any]] = None,
        *,
        limit: Optional[int] = None,
        shared: bool = False,
    ) -> OrderedLock:
        """A context manager that holds a lease on every resource of ``resources``, in any
        partitions, while its body runs (Curator's ``InterProcessMultiLock``)::

            with client.lock_ordered(["orders/7", "stock/42"], ttl=15, wait=30) as leases:
                leases.check()
                ...

        On entry it takes them one by one with :meth:`lock`, in name order (so that two
        processes taking overlapping sets cannot wait on each other in a circle), all
        within ``wait`` seconds; when one fails (:class:`LeaseHeld` when the wait ran out,
        or any other error) it releases what it took, the last taken first, and raises
        that error. It returns an :class:`OrderedLeases`: each lease is renewed on its
        own, and its ``lost`` is set the moment ANY of them is lost. On exit every lease is
        released, the last taken first.

        Unlike :meth:`lock_many`, the leases are not granted at once: while it waits for
        one resource it holds the ones before it in order. Prefer :meth:`lock_many` for
        names of one partition (or on a lone server).
        """
        return OrderedLock(
            self, resources, ttl=ttl, wait=wait, owner=owner, metadata=metadata,
            limit=limit, shared=shared,
        )

    def run_when_leader(
        self,
        resource: str,
        fn: Callable[..., Any],
        *,
        ttl: Duration = 15.0,
        retry_interval: Duration = 5.0,
        owner: Optional[str] = None,
        stop: Optional[threading.Event] = None,
        metadata: Optional[Mapping[str, Any]] = None,
        on_standby: Optional[Callable[[MutexdError, float], Any]] = None,
    ) -> None:
        """Runs ``fn`` whenever this process leads ``resource``; see
        :func:`mutexd.run_when_leader` for the exact contract."""
        _leader.run_when_leader(
            self,
            resource,
            fn,
            ttl=ttl,
            retry_interval=retry_interval,
            owner=owner,
            stop=stop,
            metadata=metadata,
            on_standby=on_standby,
        )

