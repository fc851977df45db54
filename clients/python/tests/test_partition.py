"""mutexd.partition_of against the published test vectors (tests/vectors/partitions.json,
the table of docs/api.md, "Partitions"), which the server's tests and every client's run
too; and the hash-tag rule's edges. No server."""

from __future__ import annotations

import json
import os
import zlib
from typing import Any

import pytest

import mutexd
from mutexd._partition import hash_tag, name_hash

VECTORS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..",
                       "tests", "vectors", "partitions.json")


def vectors() -> list[dict[str, Any]]:
    with open(VECTORS, encoding="utf-8") as f:
        found: list[dict[str, Any]] = json.load(f)["vectors"]
    return found


def test_every_published_vector_holds() -> None:
    checked = 0
    for v in vectors():
        name = v["name"]
        assert hash_tag(name.encode()) == v["hashed"].encode(), name
        assert name_hash(name) == int(v["crc32"], 16), name
        for count, want in v["partitions"].items():
            assert mutexd.partition_of(name, int(count)) == want, (name, count)
            checked += 1
    assert checked >= 40


def test_the_hash_tag_rule() -> None:
    # Edges the vectors leave out: one byte between the braces is a tag, a tag may end the
    # name, and a `}` before the first `{` closes nothing.
    for name, tag in [("{x}", "x"), ("x/{order-7}", "order-7"), ("a}b{c}", "c")]:
        assert hash_tag(name.encode()) == tag.encode(), name
    # Bytes of UTF-8, not code points.
    assert name_hash("{é}/x") == zlib.crc32("é".encode("utf-8"))
    # Names that share a tag share a partition, whatever the count.
    for count in range(1, 257):
        assert mutexd.partition_of("{o}/a", count) == mutexd.partition_of("{o}/bb", count)


def test_a_count_out_of_range_is_refused() -> None:
    for count in (0, -1, 257):
        with pytest.raises(ValueError):
            mutexd.partition_of("a", count)
    for bad in (True, 3.0, "3", None):
        with pytest.raises(TypeError):
            mutexd.partition_of("a", bad)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        mutexd.partition_of(b"a", 3)  # type: ignore[arg-type]
