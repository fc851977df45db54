"""pytest fixtures shared by the integration and chaos suites."""

import pytest

from harness import Server, kill_leftovers


@pytest.fixture(autouse=True)
def no_leftover_servers():
    """After each test, whatever it did: no server it started is left running."""
    yield
    kill_leftovers()


@pytest.fixture
def server():
    """A fresh server with an empty data directory, stopped (and checked) afterwards."""
    s = Server().start()
    yield s
    s.stop()


@pytest.fixture
def client(server):
    c = server.client()
    yield c
    c.close()
