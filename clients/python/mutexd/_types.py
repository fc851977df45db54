"""The values the API answers with, and the conversion of durations.

Durations: the API speaks integer milliseconds (``ttl_ms``, ``expires_in_ms``...). This
package takes and gives seconds as ``float`` (``ttl=1.5`` is sent as ``"ttl_ms": 1500``),
and keeps the exact integers beside them (``ttl_ms``, ``expires_in_ms``).
"""

from __future__ import annotations

import datetime as _dt
import math
from dataclasses import dataclass, field
from collections.abc import Mapping
from typing import Any, Optional, Union

__all__ = [
    "Duration",
    "Position",
    "Lease",
    "Holder",
    "LeaseHolder",
    "ResourceState",
    "ResourcePage",
    "ResourceList",
    "Event",
    "EventPage",
    "WhoAmI",
    "to_ms",
]

#: A duration: seconds as ``int`` or ``float``, or a ``datetime.timedelta``.
Duration = Union[int, float, _dt.timedelta]

#: Where a list watch or the events stand: a change index (``int``) on a lone server or a
#: group of one partition, an opaque ``str`` on a partitioned group (``--partitions N``,
#: N > 1), where one number cannot order the changes of every partition. Pass it back
#: unchanged.
Position = Union[int, str]


def to_ms(value: Duration, name: str) -> int:
    """Seconds (or a timedelta) to whole milliseconds, rounded to the nearest."""
    if isinstance(value, _dt.timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError("%s must be a number of seconds, not %r" % (name, value))
    else:
        seconds = float(value)
    if math.isnan(seconds) or math.isinf(seconds) or seconds < 0:
        raise ValueError("%s must be a finite, non-negative number of seconds" % name)
    return int(round(seconds * 1000.0))


def _time(value: Any) -> Optional[_dt.datetime]:
    """An RFC 3339 UTC time (``2026-01-15T09:30:00.000Z``) as an aware datetime."""
    if not isinstance(value, str) or not value:
        return None
    text = value[:-1] + "+00:00" if value.endswith(("Z", "z")) else value
    try:
        return _dt.datetime.fromisoformat(text)
    except ValueError:
        return None


def _int(data: Mapping[str, Any], key: str) -> int:
    value = data.get(key)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError("the answer's %r is not an integer: %r" % (key, value))
    return value


def _position(data: Mapping[str, Any], key: str) -> Position:
    value = data.get(key)
    if isinstance(value, str) and value:
        return value
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError("the answer's %r is neither an integer nor a position: %r"
                         % (key, value))
    return value


def _optional_position(data: Any, key: str) -> Optional[Position]:
    if not isinstance(data, Mapping) or data.get(key) is None:
        return None
    return _position(data, key)


def later(at: Position, answered: Position) -> Position:
    """The position to go on from: the greater of two change indexes (a server of a group
    may answer with one behind another's), else the one answered, as positions are passed
    back unchanged."""
    if isinstance(at, int) and isinstance(answered, int):
        return max(at, answered)
    return answered


def check_position(value: Any, name: str) -> None:
    """Refuses what is neither a non-negative ``int`` nor a non-empty ``str``."""
    if isinstance(value, str):
        if not value:
            raise ValueError("%s must not be empty" % name)
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError("%s must be a non-negative int, or a position (str)" % name)


def resource_list(resources: Any) -> list[str]:
    """The names of a request about several resources, as a list (the server checks the
    rest: 2 to 64, each once)."""
    if isinstance(resources, (str, bytes)):
        raise TypeError("resources must be a list of names, not one %s" % type(resources).__name__)
    names = list(resources)
    if not names:
        raise ValueError("no resource named")
    for name in names:
        if not isinstance(name, str):
            raise TypeError("a resource must be a str, not %s" % type(name).__name__)
    return names


def _metadata(value: Any) -> Optional[dict[str, Any]]:
    return value if isinstance(value, dict) else None


def _limit(data: Mapping[str, Any]) -> int:
    """The answer's ``limit``; 1 when absent (a server without semaphores)."""
    return _int(data, "limit") if "limit" in data else 1


def _shared(data: Mapping[str, Any]) -> bool:
    """The answer's ``shared``; false when absent (a server without shared leases)."""
    value = data.get("shared", False)
    if not isinstance(value, bool):
        raise ValueError("the answer's 'shared' is not a boolean: %r" % (value,))
    return value


@dataclass(frozen=True)
class Lease:
    """A granted lease, as ``acquire`` and ``renew`` answer it.

    ``lease_id`` is the credential: whoever knows it can renew and release the lease.

    Times: ``ttl`` and ``expires_in`` are seconds (``ttl_ms`` and ``expires_in_ms`` the
    exact integers). ``acquired_at`` and ``renewed_at`` are the server's wall-clock times,
    informative only. ``deadline`` is the moment, on this process's ``time.monotonic()``
    clock, when the lease ends unless renewed: ``expires_in`` counted from when the request
    was sent (so never later than the server's own deadline), or from when the answer
    arrived for an acquire that waited in the queue.

    ``limit`` is how many leases may hold the resource at once (more than 1: a counting
    semaphore), ``shared`` whether this lease is a shared one (a reader).
    """

    resource: str
    lease_id: str
    owner: str
    fencing_token: int
    ttl_ms: int
    expires_in_ms: int
    acquired_at: Optional[_dt.datetime]
    renewed_at: Optional[_dt.datetime]
    metadata: Optional[dict[str, Any]]
    deadline: float = field(compare=False)
    limit: int = 1
    shared: bool = False

    @property
    def ttl(self) -> float:
        """The lease's time to live, in seconds."""
        return self.ttl_ms / 1000.0

    @property
    def expires_in(self) -> float:
        """The lease's remaining time in seconds when the server answered."""
        return self.expires_in_ms / 1000.0

    @classmethod
    def from_json(cls, data: Mapping[str, Any], base: float) -> "Lease":
        """Builds a lease from an answer; ``base`` is the monotonic time ``expires_in``
        counts from."""
        expires_in_ms = _int(data, "expires_in_ms")
        return cls(
            resource=str(data.get("resource", "")),
            lease_id=str(data.get("lease_id", "")),
            owner=str(data.get("owner", "")),
            fencing_token=_int(data, "fencing_token"),
            ttl_ms=_int(data, "ttl_ms"),
            expires_in_ms=expires_in_ms,
            acquired_at=_time(data.get("acquired_at")),
            renewed_at=_time(data.get("renewed_at")),
            metadata=_metadata(data.get("metadata")),
            deadline=base + expires_in_ms / 1000.0,
            limit=_limit(data),
            shared=_shared(data),
        )


@dataclass(frozen=True)
class LeaseHolder:
    """Who holds a resource, as a 409 ``lease_held`` says it."""

    owner: str
    fencing_token: int
    expires_in_ms: int

    @property
    def expires_in(self) -> float:
        """The holder's remaining time in seconds."""
        return self.expires_in_ms / 1000.0

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "LeaseHolder":
        return cls(
            owner=str(data.get("owner", "")),
            fencing_token=int(data.get("fencing_token") or 0),
            expires_in_ms=int(data.get("expires_in_ms") or 0),
        )


@dataclass(frozen=True)
class Holder:
    """A lease holding a resource as ``get``, ``watch`` and ``list`` show it (never with
    its ``lease_id``); ``shared`` says whether it is a shared lease (a reader)."""

    owner: str
    fencing_token: int
    ttl_ms: int
    expires_in_ms: int
    acquired_at: Optional[_dt.datetime]
    renewed_at: Optional[_dt.datetime]
    metadata: Optional[dict[str, Any]]
    shared: bool = False

    @property
    def ttl(self) -> float:
        return self.ttl_ms / 1000.0

    @property
    def expires_in(self) -> float:
        return self.expires_in_ms / 1000.0

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "Holder":
        return cls(
            owner=str(data.get("owner", "")),
            fencing_token=_int(data, "fencing_token"),
            ttl_ms=_int(data, "ttl_ms"),
            expires_in_ms=_int(data, "expires_in_ms"),
            acquired_at=_time(data.get("acquired_at")),
            renewed_at=_time(data.get("renewed_at")),
            metadata=_metadata(data.get("metadata")),
            shared=_shared(data),
        )


@dataclass(frozen=True)
class ResourceState:
    """The state of one resource.

    ``index`` increases on every change of the resource (grant, renew, release, break,
    expiry); pass it to :meth:`Client.watch` to wait for the next change.

    ``holders`` is every lease holding the resource, oldest grant first (several for a
    semaphore or shared leases); ``holder`` is the first of them, or ``None``. ``limit``
    is the semaphore's limit in force (1 for a free resource or an exclusive lease).
    """

    resource: str
    state: str
    index: int
    holder: Optional[Holder]
    waiters: int
    limit: int = 1
    holders: list[Holder] = field(default_factory=list)

    @property
    def held(self) -> bool:
        """True when a lease holds the resource."""
        return self.state == "held"

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "ResourceState":
        raw = data.get("holder")
        holder = Holder.from_json(raw) if isinstance(raw, dict) else None
        raw_holders = data.get("holders")
        if raw_holders is None:  # a server without semaphores: the one holder, if any
            holders = [holder] if holder is not None else []
        elif isinstance(raw_holders, list) and all(isinstance(h, dict) for h in raw_holders):
            holders = [Holder.from_json(h) for h in raw_holders]
        else:
            raise ValueError("the answer's 'holders' is not a list of objects: %r"
                             % (raw_holders,))
        return cls(
            resource=str(data.get("resource", "")),
            state=str(data.get("state", "")),
            index=_int(data, "index"),
            holder=holder,
            waiters=int(data.get("waiters") or 0),
            limit=_limit(data),
            holders=holders,
        )


@dataclass(frozen=True)
class ResourcePage:
    """One page of :meth:`Client.list_page`: held resources in name order, and the cursor
    of the next page (``None`` on the last). ``index`` is the server's change index when
    the page was read (``None`` from a server without it), a :data:`Position` (``str``)
    on a partitioned group: a list watch waits for a change after it."""

    resources: list[ResourceState]
    next_cursor: Optional[str]
    index: Optional[Position] = None


@dataclass(frozen=True)
class ResourceList:
    """Every held resource under a prefix, as :meth:`Client.watch_list` and
    :meth:`Client.watch_prefix` give it: ``resources`` in name order (each with all its
    holders), and ``index``, the server's change index when it was read, to watch from (a
    :data:`Position`: a ``str`` on a partitioned group)."""

    index: Position
    resources: list[ResourceState]

    def __len__(self) -> int:
        return len(self.resources)

    def names(self) -> list[str]:
        """The names of the held resources, in order."""
        return [r.resource for r in self.resources]


@dataclass(frozen=True)
class Event:
    """One recent change of a resource, as :meth:`Client.events` gives it (never with a
    lease id).

    ``type`` is ``"granted"``, ``"renewed"``, ``"released"``, ``"expired"`` or
    ``"broken"``; ``index`` is the change's index (pass it as ``after`` to read what came
    next); ``at`` is the server's wall-clock time, informative only; ``limit`` is the
    resource's limit (more than 1: a counting semaphore) and ``shared`` whether the lease
    was a shared one. On a partitioned group ``partition`` is the resource's partition
    (``None`` elsewhere) and ``index`` that partition's change index: there the events are
    read on from a page's ``next``, a position, not from an event's ``index``.
    """

    index: int
    at: Optional[_dt.datetime]
    resource: str
    type: str
    owner: str
    fencing_token: int
    shared: bool = False
    limit: int = 1
    partition: Optional[int] = None

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "Event":
        kind = data.get("type")
        if not isinstance(kind, str):
            raise ValueError("the event's 'type' is not a string: %r" % (kind,))
        return cls(
            index=_int(data, "index"),
            at=_time(data.get("at")),
            resource=str(data.get("resource", "")),
            type=kind,
            owner=str(data.get("owner") or ""),
            fencing_token=_int(data, "fencing_token"),
            shared=_shared(data),
            limit=_limit(data),
            partition=_int(data, "partition") if data.get("partition") is not None else None,
        )


@dataclass(frozen=True)
class EventPage:
    """One answer of :meth:`Client.events_page`: ``events`` oldest first, ``next`` (the
    ``after`` of the next request: a :data:`Position`, a ``str`` on a partitioned group)
    and ``truncated``: events after the ``after`` asked for
    were dropped already (the server keeps the last ``--event-history`` only, and starts
    afresh on a restart), so ``events`` starts at the oldest it has and some were missed."""

    events: list[Event]
    next: Position
    truncated: bool = False

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "EventPage":
        items = data.get("events")
        if not isinstance(items, list) or not all(isinstance(e, dict) for e in items):
            raise ValueError("the answer's 'events' is not a list of objects")
        truncated = data.get("truncated", False)
        if not isinstance(truncated, bool):
            raise ValueError("the answer's 'truncated' is not a boolean: %r" % (truncated,))
        return cls([Event.from_json(e) for e in items], _position(data, "next"), truncated)


@dataclass(frozen=True)
class WhoAmI:
    """Who the client's token is, as :meth:`Client.whoami` says: its ``name`` in the
    server's tokens file (``None`` with authorization off) and its ``scopes``
    (``"read"``, ``"write"``, ``"admin"``, ``"metrics"``; all four with authorization
    off)."""

    name: Optional[str]
    scopes: tuple[str, ...]

    def has_scope(self, scope: str) -> bool:
        """True when the token has ``scope``."""
        return scope in self.scopes

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "WhoAmI":
        name = data.get("name")
        scopes = data.get("scopes")
        if name is not None and not isinstance(name, str):
            raise ValueError("the answer's 'name' is not a string: %r" % (name,))
        if not isinstance(scopes, list) or not all(isinstance(x, str) for x in scopes):
            raise ValueError("the answer's 'scopes' is not a list of strings: %r" % (scopes,))
        return cls(name, tuple(scopes))
