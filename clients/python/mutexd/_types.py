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
    """The current lease of a resource as ``get``, ``watch`` and ``list`` show it (never
    with its ``lease_id``)."""

    owner: str
    fencing_token: int
    ttl_ms: int
    expires_in_ms: int
    acquired_at: Optional[_dt.datetime]
    renewed_at: Optional[_dt.datetime]
    metadata: Optional[dict[str, Any]]

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
        )


@dataclass(frozen=True)
class ResourceState:
    """The state of one resource.

    ``index`` increases on every change of the resource (grant, renew, release, break,
    expiry); pass it to :meth:`Client.watch` to wait for the next change.
    """

    resource: str
    state: str
    index: int
    holder: Optional[Holder]
    waiters: int

    @property
    def held(self) -> bool:
        """True when a lease holds the resource."""
        return self.state == "held"

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "ResourceState":
        holder = data.get("holder")
        return cls(
            resource=str(data.get("resource", "")),
            state=str(data.get("state", "")),
            index=_int(data, "index"),
            holder=Holder.from_json(holder) if isinstance(holder, dict) else None,
            waiters=int(data.get("waiters") or 0),
        )


@dataclass(frozen=True)
class ResourcePage:
    """One page of :meth:`Client.list_page`: held resources in name order, and the cursor
    of the next page (``None`` on the last)."""

    resources: list[ResourceState]
    next_cursor: Optional[str]
