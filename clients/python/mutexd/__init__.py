"""Python client of mutexd, a lease server: timed leases on named resources over
HTTP/JSON (exclusive, shared, or a counting semaphore's), for leader election and for
guarding shared resources.

    import mutexd

    client = mutexd.Client("http://127.0.0.1:8080")
    with client.lock("jobs/nightly-report", ttl=15) as lease:
        ...  # stop at once if lease.lost is set; pass lease.fencing_token on

Durations are seconds (``float``); the API's integer milliseconds are converted. Only
the standard library is used. A :class:`Client` is safe to share between threads.
"""

import logging as _logging

from ._client import Client, default_owner
from . import _errors
from ._errors import *  # noqa: F401,F403 (the names in _errors.__all__)
from ._leader import LeaderStop, run_when_leader
from ._lock import HeldLease, HeldLeases, Lock, MultiLock, OrderedLeases, OrderedLock
from ._partition import partition_of
from ._types import (
    Duration,
    Event,
    EventPage,
    Holder,
    Lease,
    LeaseHolder,
    Position,
    ResourceList,
    ResourcePage,
    ResourceState,
    WhoAmI,
)
from ._version import __version__

_logging.getLogger("mutexd").addHandler(_logging.NullHandler())

__all__ = [
    "__version__",
    "Client",
    "default_owner",
    "run_when_leader",
    "partition_of",
    "Lock",
    "HeldLease",
    "MultiLock",
    "HeldLeases",
    "OrderedLock",
    "OrderedLeases",
    "LeaderStop",
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
] + _errors.__all__
