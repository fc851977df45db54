"""Fixtures: real mutexd servers, and clients of them. The package is imported from the
source tree."""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Callable, Iterator

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))  # the mutexd package
sys.path.insert(0, HERE)  # mutexd_testserver

import mutexd  # noqa: E402
from mutexd_testserver import MutexdServer, servers  # noqa: E402


@pytest.fixture
def start_server() -> Iterator[Callable[..., MutexdServer]]:
    """start_server(*args, scheme="http"): a server of the test's own, stopped (SIGTERM,
    exit 0 checked) at its end unless the test killed it."""
    yield from servers()


@pytest.fixture(scope="module")
def server() -> Iterator[MutexdServer]:
    """A server shared by the tests of a module (each test uses names of its own)."""
    for start in servers():
        yield start()


@pytest.fixture
def client(server: MutexdServer) -> Iterator[mutexd.Client]:
    c = mutexd.Client(server.url, timeout=5.0)
    yield c
    c.close()


@pytest.fixture
def other(server: MutexdServer) -> Iterator[mutexd.Client]:
    """A second, independent client (another process, as far as the server knows)."""
    c = mutexd.Client(server.url, timeout=5.0)
    yield c
    c.close()


@pytest.fixture
def name() -> str:
    """A resource name of its own for each test."""
    return "tests/%s" % uuid.uuid4().hex[:12]
