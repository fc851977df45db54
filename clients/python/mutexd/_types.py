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
    "Lease",
    "Holder",
    "LeaseHolder",
    "ResourceState",
    "ResourcePage",
    "to_ms",
]

#: A duration: seconds as ``int`` or ``float``, or a ``datetime.timedelta``.
Duration = Union[int, float, _dt.timedelta]


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
    of the next page (``None`` on the last)."""

    resources: list[ResourceState]
    next_cursor: Optional[str]
