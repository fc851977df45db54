"""A lease kept alive in the background, and the ``lock`` context manager; the same for
several resources at once (``lock_many``: one request for the set, renewed and released as
a set) and the ordered helper (``lock_ordered``: one lock per resource, taken in name
order)."""

from __future__ import annotations

import datetime as _dt
import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Generic, Optional, Protocol, TypeVar, Union

from ._errors import LeaseExpired, LeaseLost, MutexdError, TransportError
from ._ops import LeaseOps, MultiLeaseOps
from ._types import Duration, Lease, resource_list, to_ms

__all__ = ["HeldLease", "Lock", "HeldLeases", "MultiLock", "OrderedLeases", "OrderedLock"]

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
    """The ``lost`` event: also set by asking it once its holder's clock says so (a lease's
    deadline has passed; of :class:`OrderedLeases`, any of its leases')."""

    def __init__(self, holder: "_Losable") -> None:
        super().__init__()
        self._holder = holder

    def _due(self) -> bool:
        return self._holder._lost_due()


def _call_back(callbacks: list[Callable[[], Any]]) -> None:
    """Calls the ``on_lost`` callbacks, each whatever the others do."""
    for callback in callbacks:
        try:
            callback()
        except Exception:  # a callback's failure must not stop the others
            log.exception("on_lost callback failed")


class _Losable:
    """What :class:`HeldLease`, :class:`HeldLeases` and :class:`OrderedLeases` share:
    ``lost`` and ``error``, :meth:`on_lost`, :meth:`check` and ``expires_in``. A subclass
    gives :attr:`deadline`, says when the clock makes ``lost`` due (:meth:`_lost_due`), and
    how to release."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._callbacks: list[Callable[[], Any]] = []
        self.lost: threading.Event = _LostEvent(self)
        self.error: Optional[BaseException] = None

    @property
    def deadline(self) -> float:
        raise NotImplementedError

    def _lost_due(self) -> bool:
        """Declares the loss if the clock says so; True when it is lost."""
        raise NotImplementedError

    def release(self) -> bool:
        """Stops renewing and gives the lease (or leases) back; True when the server took
        them back."""
        raise NotImplementedError

    @property
    def expires_in(self) -> float:
        """Seconds left until :attr:`deadline` (0 once passed or lost)."""
        if self.lost.is_set():
            return 0.0
        return max(0.0, self.deadline - time.monotonic())

    def check(self) -> None:
        """Raises :attr:`error` (:class:`LeaseLost` or :class:`LeaseExpired`) if the lease
        (of several: any of them) is lost or its deadline has passed (on the clock, now:
        whether or not a renewal has been tried since); call it before every action the
        lease must guard."""
        if self.lost.is_set():
            assert self.error is not None
            raise self.error

    def on_lost(self, callback: Callable[[], Any]) -> None:
        """Calls ``callback()`` (from the thread that detects it) when the lease (of
        several: the first of them) is lost, right after ``lost`` is set; at once if it is
        lost already."""
        with self._cond:
            if not self._is_lost():
                self._callbacks.append(callback)
                return
        callback()

    def _is_lost(self) -> bool:
        return threading.Event.is_set(self.lost)

    def _lose(self, error: Optional[BaseException]) -> list[Callable[[], Any]]:
        """Sets ``error`` and ``lost`` (with ``_cond`` held, once): returns the callbacks
        to call, after ``_cond`` is let go, with :func:`_call_back`."""
        self.error = error
        self.lost.set()
        callbacks, self._callbacks = self._callbacks, []
        return callbacks


_K = TypeVar("_K", bound="_KeptAlive")


class _KeptAlive(_Losable):
    """What :class:`HeldLease` and :class:`HeldLeases` share: the renewing thread, the
    deadline watchdog, the loss by the deadline, and the release. A subclass says how to
    renew (:meth:`_send_renewal`), what to keep of the answer (:meth:`_take`), and how to
    name what it holds in messages."""

    def __init__(self, client: Any, ttl: float, deadline: float, expires_in: float) -> None:
        super().__init__()
        self._client = client
        self._ttl = ttl
        self._margin = safety_margin(ttl)
        self._deadline = deadline - self._margin
        self._base = deadline - expires_in
        self._stopped = False
        self._threads: list[threading.Thread] = []
        self._inflight: Optional[float] = None  # when the renewal under way was sent
        self.last_error: Optional[BaseException] = None
        self.renewals = 0

    # -- what a subclass says ----------------------------------------------------------

    def _send_renewal(self, timeout: float, deadline: float) -> Any:
        """Renews (raises :class:`LeaseLost` when lost, another error when it failed)."""
        raise NotImplementedError

    def _take(self, answer: Any, sent: float) -> float:
        """Keeps a successful renewal's answer (called with the lock held); returns the
        monotonic time the lease (every lease of the set) ends unless renewed again."""
        raise NotImplementedError

    def _label(self) -> str:
        """What is held, for messages: "lease on jobs/x"."""
        raise NotImplementedError

    def _what(self) -> str:
        return "the " + self._label()

    def _tokens(self) -> str:
        """The fencing token(s), for the log."""
        raise NotImplementedError

    def _thread_name(self) -> str:
        raise NotImplementedError

    # -- the deadline, and loss -----------------------------------------------------------

    @property
    def deadline(self) -> float:
        """The client's ``time.monotonic()`` by which the lease ends unless renewed."""
        with self._cond:
            return self._deadline

    def _lost_due(self) -> bool:
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
            "no renewal of %s succeeded before its deadline (%s)" % (self._what(), why)
        ))

    def _released(self, send: Callable[[], Any]) -> bool:
        """The release, once renewing has stopped: ``send()``, best effort (True when the
        server released what it names; never raises a client error)."""
        try:
            send()
        except LeaseLost:
            return False
        except MutexdError as exc:
            log.warning("releasing %s failed: %s", self._what(), exc)
            return False
        return True

    # -- keeping it alive ----------------------------------------------------------------

    def start(self: _K) -> _K:
        """Starts the renewing thread and the deadline watchdog."""
        for name, target in (("renew", self._renew_loop), ("deadline", self._watchdog)):
            t = threading.Thread(
                target=target, name="mutexd-%s %s" % (name, self._thread_name()), daemon=True
            )
            self._threads.append(t)
            t.start()
        return self

    def _set_lost(self, error: BaseException) -> None:
        with self._cond:
            if self._is_lost() or self._stopped:
                return
            callbacks = self._lose(error)
            self._cond.notify_all()
        log.warning("%s (%s) lost: %s", self._label(), self._tokens(), error)
        _call_back(callbacks)

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
        ttl = self._ttl
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
                answer = self._send_renewal(
                    max(0.01, min(self._client.timeout, period, remaining)), sent + remaining
                )
            except LeaseLost as exc:
                self._inflight = None
                self._set_lost(exc)
                return
            except Exception as exc:  # transient: retry, on a new connection, until the deadline
                self.last_error = exc
                self._inflight = None
                log.debug("renewing %s failed: %s", self._what(), exc)
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
                    self._base = sent
                    self._deadline = self._take(answer, sent) - self._margin
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


class HeldLease(_KeptAlive):
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
        super().__init__(client, lease.ttl, lease.deadline, lease.expires_in)
        self._lease = lease

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

    def __repr__(self) -> str:
        return "<HeldLease %s token=%d%s>" % (
            self.resource,
            self.fencing_token,
            " lost" if self.lost.is_set() else "",
        )

    # -- the renewal -------------------------------------------------------------------

    def _send_renewal(self, timeout: float, deadline: float) -> Lease:
        return self._client.renew(  # type: ignore[no-any-return]
            self.resource, self.lease_id, timeout=timeout, deadline=deadline
        )

    def _take(self, answer: Lease, sent: float) -> float:
        self._lease = answer
        return answer.deadline

    def _label(self) -> str:
        return "lease on %s" % self.resource

    def _tokens(self) -> str:
        return "fencing token %d" % self.fencing_token

    def _thread_name(self) -> str:
        return self.resource

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
        return self._released(lambda: self._client.release(self.resource, self.lease_id))


class _Named(Protocol):
    """A lease (a :class:`Lease` or a :class:`HeldLease`), as :class:`_Several` reads it."""

    @property
    def resource(self) -> str: ...

    @property
    def fencing_token(self) -> int: ...


_Item = TypeVar("_Item", bound=_Named)


class _Several(Generic[_Item]):
    """What :class:`HeldLeases` and :class:`OrderedLeases` share: their leases by name or
    place, in the order of ``resources``, and their fencing tokens. A subclass gives the
    leases (:meth:`_items`)."""

    lost: threading.Event

    def _items(self) -> Sequence[_Item]:
        raise NotImplementedError

    @property
    def fencing_tokens(self) -> dict[str, int]:
        """Each resource's fencing token, by name (a renewal keeps them)."""
        return {item.resource: item.fencing_token for item in self._items()}

    def __getitem__(self, key: Union[str, int]) -> _Item:
        """The lease on the resource named ``key``, or the ``key``-th (in the order of
        ``resources``)."""
        items = self._items()
        if isinstance(key, str):
            for item in items:
                if item.resource == key:
                    return item
            raise KeyError(key)
        return items[key]

    def __iter__(self) -> Iterator[_Item]:
        return iter(self._items())

    def __len__(self) -> int:
        return len(self._items())

    def __repr__(self) -> str:
        return "<%s %s%s>" % (
            type(self).__name__,
            " ".join("%s token=%d" % (item.resource, item.fencing_token)
                     for item in self._items()),
            " lost" if self.lost.is_set() else "",
        )


class HeldLeases(_KeptAlive, _Several[Lease]):
    """Leases on several resources, taken at once under one lease id
    (:meth:`Client.lock_many`), that a background thread keeps renewing as a set, with one
    request for all of them, until :meth:`release`.

    It has everything of :class:`HeldLease` that is not one resource's: ``lost``,
    :meth:`check`, :meth:`on_lost`, ``error``, ``last_error``, ``expires_in``,
    ``deadline``, ``renewals``, ``lease_id``, ``owner``, ``ttl``. ``lost`` is set the
    moment a renewal of the set is answered ``lease_lost`` (ANY lease of the set was
    broken, or taken by another lease after it expired: ``error.resources`` names which),
    or when the deadline passes without a successful renewal of the set; the deadline is
    the earliest of the leases'. What is said of :class:`HeldLease`'s renewals and
    deadline holds for the set.

    The leases themselves, as the last successful acquire or renewal answered them
    (:class:`Lease`, in the order the resources were given): ``leases[name]`` or
    ``leases[i]``, ``for lease in leases``, ``len(leases)``; ``resources`` is the names,
    ``fencing_tokens`` a dict of each one's token (a renewal keeps them). Pass each
    resource's own token to what that resource guards.
    """

    def __init__(self, client: MultiLeaseOps, leases: Sequence[Lease]) -> None:
        leases = list(leases)
        if not leases:
            raise ValueError("no lease given")
        ids = {lease.lease_id for lease in leases}
        if len(ids) != 1:
            raise ValueError("the leases of a set have one lease id: got %d" % len(ids))
        first = min(leases, key=lambda lease: lease.deadline)
        super().__init__(
            client, min(lease.ttl for lease in leases), first.deadline, first.expires_in
        )
        self._leases = leases
        self._names = tuple(lease.resource for lease in leases)

    # -- the leases --------------------------------------------------------------------

    @property
    def leases(self) -> list[Lease]:
        """Every lease of the set, as the last successful acquire or renewal answered it,
        in the order given."""
        with self._cond:
            return list(self._leases)

    @property
    def resources(self) -> tuple[str, ...]:
        """The resources, in the order given."""
        return self._names

    @property
    def lease_id(self) -> str:
        """The lease id every lease of the set shares (the credential)."""
        return self._leases[0].lease_id

    @property
    def owner(self) -> str:
        return self._leases[0].owner

    @property
    def ttl(self) -> float:
        return min(lease.ttl for lease in self.leases)

    def _items(self) -> list[Lease]:
        return self.leases

    # -- the renewal -------------------------------------------------------------------

    def _send_renewal(self, timeout: float, deadline: float) -> list[Lease]:
        return self._client.renew_many(  # type: ignore[no-any-return]
            self._names, self.lease_id, timeout=timeout, deadline=deadline
        )

    def _take(self, answer: list[Lease], sent: float) -> float:
        self._leases = list(answer)
        return min(lease.deadline for lease in answer)

    def _label(self) -> str:
        return "leases on %s" % ", ".join(self._names)

    def _tokens(self) -> str:
        return "fencing tokens %s" % ", ".join(
            str(lease.fencing_token) for lease in self._leases)

    def _thread_name(self) -> str:
        return ",".join(self._names)

    def release(self) -> bool:
        """Stops renewing and releases every lease of the set with one request, best
        effort: returns True when the server released them all, False otherwise (never
        raises a client error).

        A set lost by a ``lease_lost`` answer is released too: the server releases the
        leases the set still holds, and answers ``lease_lost`` for the others.
        """
        self.stop(self._client.timeout)
        return self._released(lambda: self._client.release_many(self._names, self.lease_id))


_Held = TypeVar("_Held", bound=_Losable)


class _HeldLock(Generic[_Held]):
    """What :class:`Lock`, :class:`MultiLock` and :class:`OrderedLock` share: the options
    of the acquire, the ``with`` block that holds what it takes and releases it on
    leaving; and, unless a subclass takes otherwise (:meth:`_hold`), a proposed lease id
    given back when the acquire's answer was lost."""

    _again = ""  # the call that makes a new one, for the error of a second `with`

    def __init__(
        self,
        *,
        ttl: Duration,
        wait: Duration,
        owner: Optional[str],
        metadata: Optional[Mapping[str, Any]],
        limit: Optional[int],
        shared: bool,
    ) -> None:
        self.ttl = ttl
        self.wait = wait
        self.owner = owner
        self.metadata = metadata
        self.limit = limit
        self.shared = shared
        self.held: Optional[_Held] = None

    def _options(self, **given: Any) -> dict[str, Any]:
        """The options of the acquire, as keyword arguments; ``given`` replaces some."""
        options: dict[str, Any] = dict(
            ttl=self.ttl, wait=self.wait, owner=self.owner, metadata=self.metadata,
            limit=self.limit, shared=self.shared,
        )
        options.update(given)
        return options

    def _hold(self) -> _Held:
        """Acquires and starts holding what was granted."""
        lease_id = str(uuid.uuid4())
        try:
            return self._take(lease_id)
        except TransportError:
            # The grant may have happened without its answer reaching us: give it back.
            try:
                self._give_back(lease_id)
            except MutexdError:
                pass
            raise

    def _take(self, lease_id: str) -> _Held:
        """Acquires with `lease_id` and starts holding what was granted."""
        raise NotImplementedError

    def _give_back(self, lease_id: str) -> None:
        raise NotImplementedError

    def _what(self) -> str:
        raise NotImplementedError

    def __enter__(self) -> _Held:
        if self.held is not None:
            raise RuntimeError("this lock is held already; call %s again" % self._again)
        self.held = self._hold()
        return self.held

    def __exit__(self, *exc: object) -> None:
        held, self.held = self.held, None
        if held is None:
            return
        try:
            held.release()
        except Exception:  # never hide the body's exception
            log.exception("releasing %s failed", self._what())


class Lock(_HeldLock[HeldLease]):
    """The context manager of :meth:`Client.lock`; ``with`` gives a :class:`HeldLease`."""

    _again = "client.lock()"

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
        super().__init__(ttl=ttl, wait=wait, owner=owner, metadata=metadata, limit=limit,
                         shared=shared)
        self._client = client
        self.resource = resource

    def _take(self, lease_id: str) -> HeldLease:
        lease = self._client.acquire(self.resource, lease_id=lease_id, **self._options())
        return HeldLease(self._client, lease).start()

    def _give_back(self, lease_id: str) -> None:
        self._client.release(self.resource, lease_id)

    def _what(self) -> str:
        return "the lease on " + self.resource


class MultiLock(_HeldLock[HeldLeases]):
    """The context manager of :meth:`Client.lock_many`; ``with`` gives a
    :class:`HeldLeases`."""

    _again = "client.lock_many()"

    def __init__(
        self,
        client: MultiLeaseOps,
        resources: Sequence[str],
        *,
        ttl: Duration = 15.0,
        wait: Duration = 30.0,
        owner: Optional[str] = None,
        metadata: Optional[Mapping[str, Any]] = None,
        limit: Optional[int] = None,
        shared: bool = False,
    ) -> None:
        super().__init__(ttl=ttl, wait=wait, owner=owner, metadata=metadata, limit=limit,
                         shared=shared)
        self._client = client
        self.resources = list(resources)

    def _take(self, lease_id: str) -> HeldLeases:
        leases = self._client.acquire_many(self.resources, lease_id=lease_id, **self._options())
        return HeldLeases(self._client, leases).start()

    def _give_back(self, lease_id: str) -> None:
        self._client.release_many(self.resources, lease_id)

    def _what(self) -> str:
        return "the leases on " + ", ".join(self.resources)


class OrderedLeases(_Losable, _Several[HeldLease]):
    """The leases of :meth:`Client.lock_ordered`: one :class:`HeldLease` per resource,
    each with its own lease id, renewed on its own, taken one by one in name order.

    As a whole it has what a :class:`HeldLeases` has: ``lost`` (set the moment ANY of
    its leases is lost, and by asking it once any one's deadline has passed), ``error``
    (that lease's :class:`LeaseLost` or :class:`LeaseExpired`), :meth:`check`,
    :meth:`on_lost`, ``expires_in`` and ``deadline`` (the earliest), ``resources`` (in the
    order taken: sorted), ``fencing_tokens``, ``held[name]`` or ``held[i]`` (a
    :class:`HeldLease`), iteration and ``len``.
    """

    def __init__(self, held: Sequence[HeldLease]) -> None:
        super().__init__()
        self.held: tuple[HeldLease, ...] = tuple(held)
        for one in self.held:
            one.on_lost(lambda one=one: self._lost(one))  # type: ignore[misc]

    def _lost(self, one: HeldLease) -> None:
        with self._cond:
            if self._is_lost():
                return
            callbacks = self._lose(one.error)
        _call_back(callbacks)

    def _lost_due(self) -> bool:
        # Asking each lease sets it when its deadline passed, and its loss sets this one.
        return any(held.lost.is_set() for held in self.held)

    def _items(self) -> tuple[HeldLease, ...]:
        return self.held

    @property
    def resources(self) -> tuple[str, ...]:
        """The resources, in the order they were taken (sorted by name)."""
        return tuple(one.resource for one in self.held)

    @property
    def deadline(self) -> float:
        """The earliest :attr:`HeldLease.deadline` of the leases."""
        return min(one.deadline for one in self.held)

    def release(self) -> bool:
        """Stops renewing and releases every lease, in the reverse of the order taken,
        best effort (see :meth:`HeldLease.release`): True when every one was released."""
        done = True
        for one in reversed(self.held):
            done = one.release() and done
        return done


class OrderedLock(_HeldLock[OrderedLeases]):
    """The context manager of :meth:`Client.lock_ordered`; ``with`` gives an
    :class:`OrderedLeases`."""

    _again = "client.lock_ordered()"

    def __init__(
        self,
        client: LeaseOps,
        resources: Sequence[str],
        *,
        ttl: Duration = 15.0,
        wait: Duration = 30.0,
        owner: Optional[str] = None,
        metadata: Optional[Mapping[str, Any]] = None,
        limit: Optional[int] = None,
        shared: bool = False,
    ) -> None:
        names = resource_list(resources)
        if len(set(names)) != len(names):
            raise ValueError("a resource is named twice: each resource once")
        super().__init__(ttl=ttl, wait=wait, owner=owner, metadata=metadata, limit=limit,
                         shared=shared)
        self._client = client
        # Byte order of the names (the API's names are ASCII: str order), the same in every
        # client, so that two processes taking overlapping sets never wait on each other
        # in a circle.
        self.resources = sorted(names, key=lambda n: n.encode("utf-8"))

    def _hold(self) -> OrderedLeases:
        # ``wait`` bounds the whole: each lock waits for what is left of it.
        end = time.monotonic() + to_ms(self.wait, "wait") / 1000.0
        taken: list[HeldLease] = []
        try:
            for name in self.resources:
                lock = Lock(self._client, name, **self._options(
                    wait=max(0.0, round(end - time.monotonic(), 3))))
                taken.append(lock.__enter__())
        except BaseException:
            # What was taken is given back, the last taken first.
            for one in reversed(taken):
                try:
                    one.release()
                except Exception:
                    log.exception("releasing the lease on %s failed", one.resource)
            raise
        return OrderedLeases(taken)

    def _what(self) -> str:
        return "the leases on " + ", ".join(self.resources)
