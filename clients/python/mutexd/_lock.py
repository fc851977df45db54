"""A lease kept alive in the background, and the ``lock`` context manager."""

from __future__ import annotations

import datetime as _dt
import logging
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from typing import Any, Optional

from ._errors import LeaseExpired, LeaseLost, MutexdError, TransportError
from ._ops import LeaseOps
from ._types import Duration, Lease

__all__ = ["HeldLease", "Lock"]

log = logging.getLogger("mutexd")


def safety_margin(ttl: float) -> float:
    """How long before the end of its TTL a client stops counting on a lease: a fiftieth of
    the TTL, at most 1 s. It covers the rate difference of two clocks and the moment between
    a check and the action it guards."""
    return min(1.0, ttl / 50.0)


class _ClockedEvent(threading.Event):
    """A ``threading.Event`` that asking also sets, once ``_due()`` says so: a check made
    right after a pause (SIGSTOP, a frozen VM) sees what the clock says, not only what a
    background thread has done meanwhile."""

    def _due(self) -> bool:
        raise NotImplementedError

    def is_set(self) -> bool:
        return super().is_set() or self._due()

    isSet = is_set

    def wait(self, timeout: Optional[float] = None) -> bool:
        if self.is_set():
            return True
        super().wait(timeout)
        return self.is_set()


class _LostEvent(_ClockedEvent):
    """The ``lost`` event: also set by asking it after the lease's deadline has passed."""

    def __init__(self, held: "HeldLease") -> None:
        super().__init__()
        self._held = held

    def _due(self) -> bool:
        return self._held._expire_if_due()


class HeldLease:
    """A lease that a background thread keeps renewing until :meth:`release`.

    It has the fields of :class:`Lease` (``resource``, ``lease_id``, ``owner``,
    ``fencing_token``, ``ttl``, ``acquired_at``, ``renewed_at``, ``metadata``, ``limit``,
    ``shared``), as of the last successful renewal, and:

    - ``lost``: a ``threading.Event``, set the moment a renewal is answered
      ``lease_lost`` (the lease was broken, or another lease was granted), or when the
      lease's deadline passes without a successful renewal (the server cannot be reached,
      or keeps failing). The deadline is the client's own: ``time.monotonic()`` when the
      last successful renewal (or the acquire) was sent, plus the ``expires_in`` it was
      answered, minus a safety margin (a fiftieth of the TTL, at most 1 s); transient
      errors are retried until then. ``lost.is_set()``, ``lost.wait()`` and
      :meth:`check` compare the clock with that deadline themselves, so they are right
      even when no thread has run since it passed (a process paused by SIGSTOP, a frozen
      VM). Once set, it stays set and renewing stops. It is never decided from the
      server's wall-clock times.
    - ``expires_in``: the time left until that deadline, in seconds.
    - ``error``: why ``lost`` was set (the :class:`LeaseLost` answer, or a
      :class:`LeaseExpired`), else ``None``; ``last_error``: the last failed renewal's
      exception.

    Renewals are sent every third of the TTL; after a failure, again after a tenth of the
    TTL (at most 1 s), on a new connection, until the deadline. Each attempt may take at
    most a third of the TTL, so that one unanswered request leaves time for others; no
    attempt (to any of the client's servers) is started or lasts past the deadline.
    """

    def __init__(self, client: LeaseOps, lease: Lease) -> None:
        self._client = client
        self._lease = lease
        self._margin = safety_margin(lease.ttl)
        self._deadline = lease.deadline - self._margin
        self._base = lease.deadline - lease.expires_in
        self._cond = threading.Condition()
        self._stopped = False
        self._callbacks: list[Callable[[], Any]] = []
        self._threads: list[threading.Thread] = []
        self._inflight: Optional[float] = None  # when the renewal under way was sent
        self.lost: threading.Event = _LostEvent(self)
        self.error: Optional[BaseException] = None
        self.last_error: Optional[BaseException] = None
        self.renewals = 0

    # -- the lease's fields ------------------------------------------------------------

    @property
    def lease(self) -> Lease:
        """The :class:`Lease` as the last successful acquire or renewal answered it."""
        with self._cond:
            return self._lease

    @property
    def resource(self) -> str:
        return self._lease.resource

    @property
    def lease_id(self) -> str:
        return self._lease.lease_id

    @property
    def owner(self) -> str:
        return self._lease.owner

    @property
    def fencing_token(self) -> int:
        """The lease's fencing token (a renewal keeps it). Pass it to what you protect."""
        return self._lease.fencing_token

    @property
    def ttl(self) -> float:
        return self.lease.ttl

    @property
    def acquired_at(self) -> Optional[_dt.datetime]:
        return self.lease.acquired_at

    @property
    def renewed_at(self) -> Optional[_dt.datetime]:
        return self.lease.renewed_at

    @property
    def metadata(self) -> Optional[dict[str, Any]]:
        return self.lease.metadata

    @property
    def limit(self) -> int:
        """How many leases may hold the resource at once (more than 1: a semaphore)."""
        return self._lease.limit

    @property
    def shared(self) -> bool:
        """Whether this is a shared lease (a reader)."""
        return self._lease.shared

    @property
    def deadline(self) -> float:
        """The client's ``time.monotonic()`` by which the lease ends unless renewed."""
        with self._cond:
            return self._deadline

    @property
    def expires_in(self) -> float:
        """Seconds left until :attr:`deadline` (0 once passed or lost)."""
        if self.lost.is_set():
            return 0.0
        return max(0.0, self.deadline - time.monotonic())

    def check(self) -> None:
        """Raises :attr:`error` (:class:`LeaseLost` or :class:`LeaseExpired`) if the lease
        is lost or its deadline has passed (on the clock, now: whether or not a renewal
        has been tried since); call it before every action the lease must guard."""
        if self.lost.is_set():
            assert self.error is not None
            raise self.error

    def _is_lost(self) -> bool:
        return threading.Event.is_set(self.lost)

    def _expire_if_due(self) -> bool:
        """Declares the lease lost if its deadline has passed; True when it is lost."""
        with self._cond:
            if self._is_lost():
                return True
            if self._stopped or time.monotonic() < self._deadline:
                return False
        self._expire()
        return self._is_lost()

    def _expire(self) -> None:
        if self.last_error is not None:
            why = "last error: %s" % (self.last_error,)
        elif self._inflight is not None:
            why = "a renewal sent %.1f s before it had no answer yet" % (
                time.monotonic() - self._inflight)
        else:
            why = "no renewal was tried since the last one succeeded: the process did " \
                  "not run in time (paused, or starved)"
        self._set_lost(LeaseExpired(
            "no renewal of the lease on %s succeeded before its deadline (%s)"
            % (self.resource, why)
        ))

    def on_lost(self, callback: Callable[[], Any]) -> None:
        """Calls ``callback()`` (from the thread that detects it) when the lease is lost,
        right after ``lost`` is set; at once if it is lost already."""
        with self._cond:
            if not self._is_lost():
                self._callbacks.append(callback)
                return
        callback()

    def __repr__(self) -> str:
        return "<HeldLease %s token=%d%s>" % (
            self.resource,
            self.fencing_token,
            " lost" if self.lost.is_set() else "",
        )

    # -- keeping it alive ----------------------------------------------------------------

    def start(self) -> "HeldLease":
        """Starts the renewing thread and the deadline watchdog."""
        for name, target in (("renew", self._renew_loop), ("deadline", self._watchdog)):
            t = threading.Thread(
                target=target, name="mutexd-%s %s" % (name, self.resource), daemon=True
            )
            self._threads.append(t)
            t.start()
        return self

    def _set_lost(self, error: BaseException) -> None:
        with self._cond:
            if self._is_lost() or self._stopped:
                return
            self.error = error
            self.lost.set()
            callbacks, self._callbacks = self._callbacks, []
            self._cond.notify_all()
        log.warning("lease on %s (fencing token %d) lost: %s",
                    self.resource, self.fencing_token, error)
        for callback in callbacks:
            try:
                callback()
            except Exception:  # a callback's failure must not stop the others
                log.exception("on_lost callback failed")

    def _watchdog(self) -> None:
        with self._cond:
            while not self._stopped and not self._is_lost():
                left = self._deadline - time.monotonic()
                if left <= 0:
                    break
                self._cond.wait(left)
            else:
                return
        self._expire()

    def _renew_loop(self) -> None:
        ttl = self._lease.ttl
        period = ttl / 3.0
        retry = min(1.0, max(0.02, ttl / 10.0))
        with self._cond:
            next_at = self._base + period
        while True:
            with self._cond:
                while not self._stopped and not self._is_lost():
                    left = next_at - time.monotonic()
                    if left <= 0:
                        break
                    self._cond.wait(left)
                if self._stopped or self._is_lost():
                    return
                sent = time.monotonic()
                remaining = self._deadline - sent
                if remaining > 0:
                    self._inflight = sent
            if remaining <= 0:
                self._expire()  # the deadline passed before this renewal could be sent
                return
            try:
                lease = self._client.renew(
                    self.resource, self.lease_id,
                    timeout=max(0.01, min(self._client.timeout, period, remaining)),
                    deadline=sent + remaining,
                )
            except LeaseLost as exc:
                self._inflight = None
                self._set_lost(exc)
                return
            except Exception as exc:  # transient: retry, on a new connection, until the deadline
                self.last_error = exc
                self._inflight = None
                log.debug("renewing the lease on %s failed: %s", self.resource, exc)
                next_at = time.monotonic() + retry
                continue
            with self._cond:
                self._inflight = None
                if self._is_lost() or self._stopped:
                    return  # lost is final, even if this renewal crossed the deadline
                if time.monotonic() >= self._deadline:
                    lost_late = True  # answered after the deadline: the lease is lost
                else:
                    lost_late = False
                    self._lease = lease
                    self._base = sent
                    self._deadline = lease.deadline - self._margin
                    self.last_error = None
                    self.renewals += 1
                    self._cond.notify_all()
            if lost_late:
                self._expire()
                return
            next_at = sent + period

    def stop(self, timeout: Optional[float] = None) -> None:
        """Stops renewing (without releasing) and waits for the threads to end."""
        with self._cond:
            self._stopped = True
            self._cond.notify_all()
        me = threading.current_thread()
        for t in self._threads:
            if t is not me:
                t.join(timeout)

    def release(self) -> bool:
        """Stops renewing and releases the lease, best effort: returns True when the
        server released it, False otherwise (never raises a client error).

        A lease lost by a ``lease_lost`` answer is not released (it is not ours). A lease
        lost by its deadline is still released if the server can be reached: if nothing was
        granted since, that frees the resource for the next waiter at once.
        """
        lost_by_answer = isinstance(self.error, LeaseLost)
        self.stop(self._client.timeout)
        if lost_by_answer:
            return False
        try:
            self._client.release(self.resource, self.lease_id)
        except LeaseLost:
            return False
        except MutexdError as exc:
            log.warning("releasing the lease on %s failed: %s", self.resource, exc)
            return False
        return True


class Lock:
    """The context manager of :meth:`Client.lock`; ``with`` gives a :class:`HeldLease`."""

    def __init__(
        self,
        client: LeaseOps,
        resource: str,
        *,
        ttl: Duration = 15.0,
        wait: Duration = 30.0,
        owner: Optional[str] = None,
        metadata: Optional[Mapping[str, Any]] = None,
        limit: Optional[int] = None,
        shared: bool = False,
    ) -> None:
        self._client = client
        self.resource = resource
        self.ttl = ttl
        self.wait = wait
        self.owner = owner
        self.metadata = metadata
        self.limit = limit
        self.shared = shared
        self.held: Optional[HeldLease] = None

    def __enter__(self) -> HeldLease:
        if self.held is not None:
            raise RuntimeError("this lock is held already; call client.lock() again")
        lease_id = str(uuid.uuid4())
        try:
            lease = self._client.acquire(
                self.resource, owner=self.owner, ttl=self.ttl, wait=self.wait,
                lease_id=lease_id, metadata=self.metadata, limit=self.limit,
                shared=self.shared,
            )
        except TransportError:
            # The grant may have happened without its answer reaching us: give it back.
            try:
                self._client.release(self.resource, lease_id)
            except MutexdError:
                pass
            raise
        self.held = HeldLease(self._client, lease).start()
        return self.held

    def __exit__(self, *exc: object) -> None:
        held, self.held = self.held, None
        if held is None:
            return
        try:
            held.release()
        except Exception:  # never hide the body's exception
            log.exception("releasing the lease on %s failed", self.resource)
