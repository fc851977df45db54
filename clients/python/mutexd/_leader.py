"""Leader election: run a function while this process holds a resource's lease."""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Callable, Mapping
from typing import Any, Optional

from ._errors import LeaseHeld, MutexdError, is_retryable
from ._lock import HeldLease, _ClockedEvent
from ._ops import LeaseOps
from ._types import Duration, Lease, to_ms

__all__ = ["LeaderStop", "run_when_leader"]

log = logging.getLogger("mutexd")


# How often the loop looks at the caller's ``stop`` event.
_POLL = 0.05


class LeaderStop(_ClockedEvent):
    """The event given to the leader's function: set when it must stop at once.

    It is a ``threading.Event`` (``is_set()``, ``wait(timeout)``), and also carries the
    lease of this term of leadership: ``lease`` (a :class:`HeldLease`) and
    ``fencing_token``, to pass to what the leader writes to. ``is_set()`` and ``wait()``
    also compare the clock with the lease's deadline, so that a leader that was paused
    past it (SIGSTOP, a frozen VM) sees that it must stop before its next action, not
    after: call ``is_set()`` (or ``lease.check()``) right before each leader action.
    """

    def __init__(self, lease: HeldLease) -> None:
        super().__init__()
        self.lease = lease

    def _due(self) -> bool:
        if self.lease.lost.is_set():  # calls the on_lost callbacks, which set this event
            self.set()
            return True
        return False

    @property
    def fencing_token(self) -> int:
        return self.lease.fencing_token


def run_when_leader(
    client: LeaseOps,
    resource: str,
    fn: Callable[[LeaderStop], Any],
    *,
    ttl: Duration = 15.0,
    retry_interval: Duration = 5.0,
    owner: Optional[str] = None,
    stop: Optional[threading.Event] = None,
    metadata: Optional[Mapping[str, Any]] = None,
    on_standby: Optional[Callable[[MutexdError, float], Any]] = None,
) -> None:
    """Runs ``fn(stop_event)`` whenever this process holds the lease on ``resource``.

    The loop, until ``stop`` is set:

    1. Try to acquire the lease (without waiting in the queue). If it is held by another
       (or the server cannot be reached, or is unavailable), call
       ``on_standby(error, retry_interval)`` if given, wait ``retry_interval`` seconds
       (or until ``stop`` is set) and try again. Other errors (a bad name or TTL, a
       refused token) are raised.
    2. Granted: start renewing the lease every third of ``ttl`` in the background, and
       call ``fn(stop_event)`` in a new thread. ``stop_event`` is a :class:`LeaderStop`:
       a ``threading.Event`` that also carries ``lease`` and ``fencing_token``.
    3. The lease is lost (a renewal answered ``lease_lost``, or no renewal succeeded
       before the lease's deadline on this process's monotonic clock): ``stop_event`` is
       set at that very moment, by the thread that detects the loss. ``fn`` must then
       stop its work at once and return. The loop waits for ``fn`` to return, however
       long it takes (no second ``fn`` ever runs beside it), does not release the lost
       lease (unless it was lost by its deadline, when a release is tried), and goes back
       to step 1 at once.
    4. ``stop`` is set (the way to end the whole loop): within 50 ms ``stop_event`` is
       set, the loop waits for ``fn`` to return, releases the lease (so that another
       process takes over at once) and returns.
    5. ``fn`` returns by itself while the lease is held: the lease is released and the
       loop waits ``retry_interval`` before step 1. If ``fn`` raises, the lease is
       released and the exception is raised from ``run_when_leader``.

    A ``KeyboardInterrupt`` (or any exception) in the calling thread sets
    ``stop_event``, waits for ``fn``, releases the lease and propagates.

    Without ``stop``, the loop runs until ``fn`` raises or the thread is interrupted.
    """
    stop = stop if stop is not None else threading.Event()
    retry_s = to_ms(retry_interval, "retry_interval") / 1000.0
    # One proposed lease id per grant: an attempt whose answer was lost, repeated, gets
    # its own lease back instead of finding it "held by another".
    lease_id = str(uuid.uuid4())
    while not stop.is_set():
        try:
            lease = client.acquire(
                resource, owner=owner, ttl=ttl, wait=0, lease_id=lease_id, metadata=metadata
            )
        except MutexdError as exc:
            # Held by another, or a failure that may pass (is_retryable): wait and try
            # again. Any other error (a bad name or TTL, a refused token...) is raised,
            # since trying again cannot help.
            if not isinstance(exc, LeaseHeld) and not is_retryable(exc):
                raise
            log.debug("not the leader of %s: %s", resource, exc)
            if on_standby is not None:
                on_standby(exc, retry_s)
            stop.wait(retry_s)
            continue
        lease_id = str(uuid.uuid4())
        if stop.is_set():  # stopped while the acquire was under way: give it back
            _release_quietly(client, lease)
            return
        log.info("leader of %s (fencing token %d)", resource, lease.fencing_token)
        returned = _lead(HeldLease(client, lease), fn, stop)
        if returned and not stop.is_set():
            stop.wait(retry_s)


def _release_quietly(client: LeaseOps, lease: Lease) -> None:
    try:
        client.release(lease)
    except MutexdError as exc:
        log.warning("releasing the lease on %s failed: %s", lease.resource, exc)


def _lead(held: HeldLease, fn: Callable[[LeaderStop], Any], stop: threading.Event) -> bool:
    """One term of leadership. True when ``fn`` returned by itself while leader."""
    stop_event = LeaderStop(held)
    wake = threading.Event()
    done = threading.Event()
    errors: list[BaseException] = []

    def lost() -> None:
        stop_event.set()
        wake.set()

    def target() -> None:
        try:
            fn(stop_event)
        except BaseException as exc:  # handed to the calling thread
            errors.append(exc)
        finally:
            done.set()
            wake.set()

    held.on_lost(lost)
    held.start()
    worker = threading.Thread(target=target, name="mutexd-leader %s" % held.resource, daemon=True)
    worker.start()
    by_itself = False
    try:
        while not done.is_set() and not held.lost.is_set() and not stop.is_set():
            wake.wait(_POLL)
            wake.clear()
        by_itself = done.is_set() and not held.lost.is_set() and not stop.is_set()
    finally:
        stop_event.set()
        worker.join()
        held.release()
        if held.lost.is_set():
            log.warning("no longer the leader of %s: %s", held.resource, held.error)
    if errors:
        raise errors[0]
    return by_itself
