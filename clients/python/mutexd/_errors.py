"""The exceptions of the mutexd client.

The Node.js client has the same hierarchy, class for class, with the same parents
(``docs/clients.md`` has the table). Every exception derives from :class:`MutexdError`.
Below it:

- :class:`TransportError`: no usable HTTP answer was obtained (connection refused or
  reset, timeout, TLS failure, an answer that is not HTTP or not the JSON the API
  defines). Whether the server acted on the request is unknown. :class:`Timeout` and
  :class:`ProtocolError` are its subclasses.
- :class:`APIError`: the server answered with an error status. One subclass per error
  code of the API, found by the code, else by the status.
- :class:`LeaseExpired`: a lease kept alive in the background passed its deadline
  without a successful renewal.
"""

from __future__ import annotations

from typing import Any, Optional

from ._types import LeaseHolder

__all__ = [
    "MutexdError",
    "TransportError",
    "Timeout",
    "ProtocolError",
    "LeaseExpired",
    "APIError",
    "InvalidRequest",
    "Unauthorized",
    "Forbidden",
    "NotFound",
    "MethodNotAllowed",
    "Conflict",
    "LeaseHeld",
    "LeaseLost",
    "LimitMismatch",
    "BodyTooLarge",
    "UnsupportedMediaType",
    "TooManyWaiters",
    "Unavailable",
    "ServerError",
    "is_retryable",
]


class MutexdError(Exception):
    """Base class of every exception raised by this package."""


class TransportError(MutexdError):
    """The request got no usable HTTP answer.

    The original exception (``OSError``, ``ssl.SSLError``, ``http.client.HTTPException``,
    ``socket.timeout``...) is chained as ``__cause__``. The server may or may not have
    acted on the request.
    """

    def __init__(self, message: str, *, method: str = "", url: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.method = method
        self.url = url

    def __reduce__(self):  # type: ignore[no-untyped-def]
        return (_transport_error, (type(self), self.message, self.method, self.url))


def _transport_error(cls, message, method, url):  # type: ignore[no-untyped-def]
    return cls(message, method=method, url=url)


class Timeout(TransportError):
    """No answer within the request's timeout (beyond any wait it asked the server for)."""


class ProtocolError(TransportError):
    """The server's answer could not be understood (a 2xx that is not the JSON object the
    API defines)."""


class LeaseExpired(MutexdError):
    """A lease kept alive in the background (:meth:`Client.lock`) could not be renewed
    before its deadline, measured on this process's monotonic clock: the server may
    already have granted the resource to another client. Raised by
    :meth:`HeldLease.check`."""


class APIError(MutexdError):
    """The server answered with an error.

    Attributes:
        status: the HTTP status code.
        code: the API's error code (``"lease_held"``, ``"invalid_ttl"``...), or ``None``
            when the body was not an API error (for example a proxy's error page).
        message: the server's human sentence (not part of the contract).
        details: the whole ``error`` object, with every extra field.
        headers: the answer's headers, names in lower case.
    """

    def __init__(
        self,
        status: int,
        code: Optional[str],
        message: str,
        details: Optional[dict[str, Any]] = None,
        headers: Optional[dict[str, str]] = None,
    ) -> None:
        label = "%s %s" % (status, code or "error")
        super().__init__("%s: %s" % (label, message) if message else label)
        self.status = status
        self.code = code
        self.message = message
        self.details: dict[str, Any] = dict(details or {})
        self.headers: dict[str, str] = {k.lower(): v for k, v in (headers or {}).items()}

    @property
    def field(self) -> Optional[str]:
        """The request field at fault (400 errors), or ``None``."""
        value = self.details.get("field")
        return value if isinstance(value, str) else None

    @property
    def request_id(self) -> Optional[str]:
        """The answer's ``X-Request-Id``, to find the request in the server's log."""
        return self.headers.get("x-request-id")

    @property
    def retry_after(self) -> Optional[float]:
        """The ``Retry-After`` header in seconds, or ``None`` when absent."""
        value = self.headers.get("retry-after")
        if value is None:
            return None
        try:
            seconds = float(value.strip())
        except ValueError:
            return None
        return seconds if seconds >= 0 else None

    def __reduce__(self):  # type: ignore[no-untyped-def]
        # Picklable with its fields (for multiprocessing and the like).
        return (type(self), (self.status, self.code, self.message, self.details, self.headers))


class InvalidRequest(APIError):
    """400: bad input. ``code`` is one of ``invalid_json``, ``invalid_field``,
    ``unknown_field``, ``missing_field``, ``invalid_resource``, ``invalid_ttl``,
    ``invalid_wait``, ``invalid_lease_id``; ``field`` names the field (every code but
    ``invalid_json`` and ``invalid_resource``)."""


class Unauthorized(APIError):
    """401 ``unauthorized``: authorization is on and the bearer token is missing or bad."""


class Forbidden(APIError):
    """403 ``forbidden``: the token lacks the scope (``admin`` for break)."""


class NotFound(APIError):
    """404 ``not_found``: no such route (a wrong base URL, usually)."""


class MethodNotAllowed(APIError):
    """405 ``method_not_allowed``; ``allow`` lists the methods the path serves."""

    @property
    def allow(self) -> Optional[str]:
        return self.headers.get("allow")


class Conflict(APIError):
    """409: base of :class:`LeaseHeld`, :class:`LeaseLost` and :class:`LimitMismatch`."""

    @property
    def resource(self) -> Optional[str]:
        """The resource the conflict is about, when the server names it: an answer to a
        request about several resources (``acquire_many``, ``renew_many``,
        ``release_many``) names the first held or lost, in the order given; ``None``
        otherwise."""
        value = self.details.get("resource")
        return value if isinstance(value, str) else None


class LeaseHeld(Conflict):
    """409 ``lease_held``: another lease holds the resource (at once, or when the wait ran
    out).

    Attributes:
        holder: who holds it (:class:`LeaseHolder`: ``owner``, ``fencing_token``,
            ``expires_in``), or ``None`` if the server did not say; of several holders (a
            semaphore, shared leases), the one whose lease ends first.
        retry_after: the holder's remaining time in whole seconds, rounded up (the
            ``Retry-After`` header).
    """

    @property
    def holder(self) -> Optional[LeaseHolder]:
        raw = self.details.get("holder")
        if not isinstance(raw, dict):
            return None
        return LeaseHolder.from_json(raw)


class LeaseLost(Conflict):
    """409 ``lease_lost``: the lease is no longer the resource's (released, broken, or
    another lease was granted after it expired). Stop the work it guarded.

    Attributes:
        resources: of a request about several resources (``renew_many``,
            ``release_many``), the names the lease no longer holds, in the order given
            (the others were renewed, or released); ``[resource]`` when the answer names
            only one, else empty.
    """

    @property
    def resources(self) -> list[str]:
        raw = self.details.get("resources")
        if isinstance(raw, list) and all(isinstance(n, str) for n in raw):
            return list(raw)
        return [self.resource] if self.resource is not None else []


class LimitMismatch(Conflict):
    """409 ``limit_mismatch``: the acquire named another ``limit`` than the one in force on
    the resource (an acquire without ``limit`` names 1), at once or when its turn in the
    queue came; or it was retried with its own ``lease_id`` and another ``limit``.

    Attributes:
        limit: the semaphore's limit in force, or ``None`` if the server did not say.
    """

    @property
    def limit(self) -> Optional[int]:
        value = self.details.get("limit")
        if isinstance(value, bool) or not isinstance(value, int):
            return None
        return value


class BodyTooLarge(APIError):
    """413 ``body_too_large``: the request body is over 65536 bytes."""


class UnsupportedMediaType(APIError):
    """415 ``unsupported_media_type``."""


class TooManyWaiters(APIError):
    """429 ``too_many_waiters``: the resource's queue of waiters is full."""


class Unavailable(APIError):
    """503 ``unavailable``: not ready, overloaded or shutting down. ``reason`` says why
    when the server gave one; ``retry_after`` says when to try again."""

    @property
    def reason(self) -> Optional[str]:
        value = self.details.get("reason")
        return value if isinstance(value, str) else None


class ServerError(APIError):
    """Any other 5xx answer (an unexpected failure, or a proxy in front of the server)."""


_BY_CODE: dict[str, type[APIError]] = {
    "invalid_json": InvalidRequest,
    "invalid_field": InvalidRequest,
    "unknown_field": InvalidRequest,
    "missing_field": InvalidRequest,
    "invalid_resource": InvalidRequest,
    "invalid_ttl": InvalidRequest,
    "invalid_wait": InvalidRequest,
    "invalid_lease_id": InvalidRequest,
    "unauthorized": Unauthorized,
    "forbidden": Forbidden,
    "not_found": NotFound,
    "method_not_allowed": MethodNotAllowed,
    "lease_held": LeaseHeld,
    "lease_lost": LeaseLost,
    "limit_mismatch": LimitMismatch,
    "body_too_large": BodyTooLarge,
    "unsupported_media_type": UnsupportedMediaType,
    "too_many_waiters": TooManyWaiters,
    "unavailable": Unavailable,
}

_BY_STATUS: dict[int, type[APIError]] = {
    400: InvalidRequest,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    405: MethodNotAllowed,
    409: Conflict,
    413: BodyTooLarge,
    415: UnsupportedMediaType,
    429: TooManyWaiters,
    503: Unavailable,
}


def is_retryable(exc: BaseException) -> bool:
    """Whether trying the same call again later may succeed: no usable answer
    (:class:`TransportError`), :class:`Unavailable`, :class:`TooManyWaiters`, or another
    5xx (:class:`ServerError`)."""
    return isinstance(exc, (TransportError, Unavailable, TooManyWaiters, ServerError))


def error_class(status: int, code: Optional[str]) -> type[APIError]:
    """The exception class for an answer: by error code first, then by status."""
    if code is not None and code in _BY_CODE:
        return _BY_CODE[code]
    if status in _BY_STATUS:
        return _BY_STATUS[status]
    if status >= 500:
        return ServerError
    return APIError
