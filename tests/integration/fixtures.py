"""pytest fixtures shared by the integration and chaos suites."""

import pytest

import azure
from harness import Server, kill_leftovers, remove_own_tmp, use_own_tmp


@pytest.fixture(scope="session", autouse=True)
def own_tmp(tmp_path_factory):
    """For the whole run of this process: every temporary directory in one of its own,
    removed at the end with all in it (harness.use_own_tmp)."""
    tmp_path_factory.getbasetemp()  # pytest's own stays where it was: pytest removes it
    use_own_tmp()
    yield
    kill_leftovers()  # a server still running could write into what is being removed
    azure.stop_leftovers()
    remove_own_tmp()


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
