"""--http-poll on: libmicrohttpd waits with poll(2) instead of epoll. The request paths that
suspend and resume a connection (a blocking acquire, a watch, a commit under load, a
client that hangs up while suspended) are run again against such a server; the whole
suite also passes with MUTEXD_HTTP_POLL=on in the environment."""

import os

import pytest

from harness import Server
from test_api import test_watch_returns_on_change  # noqa: F401
from test_contention import (  # noqa: F401
    test_32_clients_never_overlap_and_tokens_follow_grant_order,
    test_many_resources_in_parallel,
    test_waiter_that_hangs_up_is_never_granted,
    test_watcher_that_hangs_up_is_dropped,
)


@pytest.fixture
def server():
    """The module's tests, imported ones too, run against a server in poll mode."""
    s = Server(args=["--http-poll", "on"]).start()
    yield s
    s.stop()


def epoll_sets(pid):
    """The process's open epoll instances."""
    n = 0
    for fd in os.listdir("/proc/%d/fd" % pid):
        try:
            if os.readlink("/proc/%d/fd/%s" % (pid, fd)) == "anon_inode:[eventpoll]":
                n += 1
        except FileNotFoundError:
            pass
    return n


# The server's own epoll sets, in both modes: hang-ups of suspended requests, and unread
# input (http/hangup.c, http/conns.c).
OWN_SETS = 2


@pytest.mark.parametrize("threads", [1, 3])
def test_poll_mode_keeps_connections_out_of_epoll(threads):
    """In epoll mode each HTTP thread of libmicrohttpd has a set of its own, which a
    suspended connection leaves and a resumed one enters again; in poll mode none."""
    counts = {}
    for mode in ("off", "on"):
        with Server(args=["--threads", str(threads), "--http-poll", mode]) as s:
            counts[mode] = epoll_sets(s.proc.pid)
            c = s.client()
            assert c.acquire("mode", owner=mode).status == 200
            c.close()
    assert counts == {"off": OWN_SETS + threads, "on": OWN_SETS}


def test_environment_variable_turns_poll_on_and_bad_values_are_refused(tmp_path):
    with Server(args=["--threads", "3"], env={"MUTEXD_HTTP_POLL": "on"}) as s:
        assert epoll_sets(s.proc.pid) == OWN_SETS
        c = s.client()
        assert c.acquire("env", owner="env").status == 200
        c.close()
    bad = Server(data_dir=str(tmp_path / "d"), args=["--http-poll", "yes"])
    with pytest.raises(RuntimeError, match="http-poll"):
        bad.start(timeout=5)
