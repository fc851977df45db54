"""pytest fixtures shared by the integration and chaos suites."""

import pytest

from harness import Server


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
