"""The partition of a resource name (docs/api.md, "Partitions"): the CRC-32 (zlib's) of the
name's UTF-8 bytes, or of its hash tag, modulo the partition count."""

from __future__ import annotations

import zlib

__all__ = ["partition_of"]

#: The largest partition count the contract allows.
PARTITIONS_MAX = 256


def hash_tag(name: bytes) -> bytes:
    """The bytes of ``name`` that are hashed, by Redis Cluster's rule: those between the
    first ``{`` and the first ``}`` after it, when there is at least one; else all of them."""
    start = name.find(b"{") + 1
    if start:
        end = name.find(b"}", start)
        if end > start:
            return name[start:end]
    return name


def name_hash(name: str) -> int:
    """The CRC-32 of what :func:`hash_tag` picks of the name's UTF-8 bytes."""
    return zlib.crc32(hash_tag(name.encode("utf-8")))


def partition_of(name: str, count: int) -> int:
    """The partition of the resource ``name`` among ``count`` partitions (1 to 256): 0 to
    ``count - 1``. Names that share a hash tag (``{order-7}/lock``, ``{order-7}/stock``)
    share a partition, whatever the count.

    Raises ``TypeError`` when ``name`` is not a ``str`` or ``count`` not an ``int``, and
    ``ValueError`` when ``count`` is out of range."""
    if not isinstance(name, str):
        raise TypeError("name must be a str, not %s" % type(name).__name__)
    if isinstance(count, bool) or not isinstance(count, int):
        raise TypeError("count must be an int, not %r" % (count,))
    if not 1 <= count <= PARTITIONS_MAX:
        raise ValueError("count must be 1 to %d, not %d" % (PARTITIONS_MAX, count))
    return name_hash(name) % count
