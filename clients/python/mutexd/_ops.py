"""What :class:`Lock`, :class:`HeldLease` and :func:`run_when_leader` need of a client:
the three lease calls and the request timeout; and what :class:`HeldLeases` needs: the
calls about several resources at once. :class:`Client` has them; they take any
object that does (a ``Client``, or a test double), so that ``_lock`` and ``_leader`` never
import ``_client``, which imports them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Optional, Protocol, Union

from ._types import Duration, Lease

__all__ = ["LeaseOps", "MultiLeaseOps"]


class LeaseOps(Protocol):
    """The part of :class:`Client` that the lock and the leader loop call."""

    @property
    def timeout(self) -> float:
        """Seconds a request may take as a whole."""

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
    ) -> Lease: ...

    def renew(
        self,
        lease: Union[Lease, str],
        lease_id: Optional[str] = None,
        *,
        timeout: Optional[float] = None,
        deadline: Optional[float] = None,
    ) -> Lease: ...

    def release(
        self,
        lease: Union[Lease, str],
        lease_id: Optional[str] = None,
        *,
        timeout: Optional[float] = None,
    ) -> None: ...


class MultiLeaseOps(LeaseOps, Protocol):
    """The part of :class:`Client` that :meth:`Client.lock_many` calls."""

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
    ) -> list[Lease]: ...

    def renew_many(
        self,
        leases: Sequence[Any],
        lease_id: Optional[str] = None,
        *,
        timeout: Optional[float] = None,
        deadline: Optional[float] = None,
    ) -> list[Lease]: ...

    def release_many(
        self,
        leases: Sequence[Any],
        lease_id: Optional[str] = None,
        *,
        timeout: Optional[float] = None,
    ) -> None: ...
