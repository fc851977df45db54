import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))

from harness import Server  # noqa: E402


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
